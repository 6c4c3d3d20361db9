"""The demo's one app: ``workflows`` (the sample order workflows the demo schedules), found
by everystep's autodiscovery through ``apps``."""
