from django.apps import AppConfig


class DemoOrdersConfig(AppConfig):
    name = "demo_orders"

    def ready(self) -> None:
        from demo_orders import workflows  # noqa: F401  (registers the demo workflows)
