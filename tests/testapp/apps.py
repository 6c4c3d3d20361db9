from django.apps import AppConfig


class TestappConfig(AppConfig):
    # No ready(): tests.testapp.workflows is found by everystep's autodiscovery, which the
    # worker subprocesses of the acceptance tests rely on.
    name = "tests.testapp"
    label = "testapp"
