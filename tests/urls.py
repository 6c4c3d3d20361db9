from django.contrib import admin
from django.urls import include, path

from tests.testapp import async_views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("everystep/", include("everystep.urls")),
    path("async/sum/", async_views.sum_view),
    path("async/gather/", async_views.gather_view),
]
