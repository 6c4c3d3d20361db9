"""everystep's read-only web UI: mount it with ``path("everystep/", include("everystep.urls"))``."""
