"""everystep's web UI for on-call: mount it with ``path("everystep/", include("everystep.urls"))``.

Pages that only read (``views``, ``audit``) and actions that write (``actions`` on one run,
``bulk`` by filter), each behind its own permission, every write audited:

- ``access``: who may see a page (``ui_view``; ``staff_view`` for the audit trail) and act;
- ``views``: the runs list, one run's page, the runners page;
- ``filters``: what the runs list is asked for (filters, search, time window, cursor);
- ``run_table``: runs as a table shows them, and links to a run;
- ``run_page``: the steps part of a run's page (step pages, graph, timeline), at any size;
- ``graph``: a run's parallel/sequence structure, rebuilt from its step ids;
- ``timeline``: where each step's bar sits, and times as human text;
- ``family``: a run's parent, children and forks, for its page;
- ``progress``: the values runs publish, on a run's page and as the runs list's ``?show=`` column;
- ``actions``: cancel, requeue, resolve a step, send an event, fork; requeue a dead runner's runs;
- ``bulk``: the same by filter, with a confirm page;
- ``notices``: what a page says after an action, named by a key in its URL;
- ``log``: the actions' log lines, every value a user typed made safe;
- ``audit``: the audit page.
"""
