"""Everystep's own workflows, registered through the registry when the app loads (so
every worker runs them with no project code), above the engine like any body:

- ``bulk_action``: ``everystep.bulk_action``, the built-in workflow that takes a UI bulk
  action batch by batch.
"""
