"""One module per command: ``everystep_worker``; ``everystep_runs`` and ``everystep_show``
(read); ``everystep_cancel``, ``everystep_requeue``, ``everystep_requeue_runner``,
``everystep_resolve_step``, ``everystep_send``, ``everystep_fork`` (write, audited);
``everystep_prune``; ``everystep_check_replay``. ``_base`` holds what they share."""
