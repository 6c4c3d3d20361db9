from django.urls import path

from shop import views

urlpatterns = [
    path("imports/", views.start_import, name="start-import"),
    path("imports/<uuid:run_id>/", views.import_page, name="import-page"),
    path("imports/<uuid:run_id>/events/", views.import_events, name="import-events"),
]
