"""The root URLconf of tests/compat/test_adding_a_door.py: /v1/ as agentsite/urls.py includes it (compat/urls.py,
imported anew once the test has put the toy door in compat.doors.DOORS)."""

from django.urls import include, path

urlpatterns = [path("v1/", include("compat.urls"))]
