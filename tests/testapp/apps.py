from django.apps import AppConfig


class TestappConfig(AppConfig):
    name = "tests.testapp"
    label = "testapp"

    def ready(self) -> None:
        from tests.testapp import workflows  # noqa: F401  (registers the test workflows)
