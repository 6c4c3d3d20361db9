import sys

from everystep_runner.cli import main

sys.exit(main())
