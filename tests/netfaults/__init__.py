"""Network faults between workers and their database (issue 37): tooling and tests."""
