from django.apps import AppConfig


class DemoOrdersConfig(AppConfig):
    name = "everystep_runner.demo.orders"
    label = "demo_orders"
