import os

from django.apps import AppConfig


class TestappConfig(AppConfig):
    # tests.testapp.workflows is found by everystep's autodiscovery, which the worker
    # subprocesses of the acceptance tests rely on; the chaos mix is imported here.
    name = "tests.testapp"
    label = "testapp"

    def ready(self) -> None:
        from tests.testapp import (
            async_workflows,  # noqa: F401  (async def bodies and steps)
            chaos,  # noqa: F401  (registers the chaos workflows)
            composition,  # noqa: F401  (child runs, result and gather)
            progress_workflows,  # noqa: F401  (publish, for a worker subprocess)
            typed_values,  # noqa: F401  (typed values through steps, runs and tasks)
            versioned,  # noqa: F401  (workflows in several versions)
        )

        if os.environ.get("EVERYSTEP_TEST_RECORD_FINISHED") == "1":
            from tests.testapp.tasks import record_finished

            record_finished()
