"""Staff users for the UI tests: every page of the UI needs an active staff user holding
``everystep.view_workflow``, and each write action a permission of its own."""

from __future__ import annotations

from django.contrib.auth.models import Permission, User


def staff_user(*perms: str, name: str = "operator", view: bool = True) -> User:
    """A staff user holding ``perms`` (codenames), and the view permission unless
    ``view`` is False; read back fresh, so no permission is cached."""
    user = User.objects.create_user(name, password="pw", is_staff=True)
    for codename in (("view_workflow",) if view else ()) + perms:
        user.user_permissions.add(Permission.objects.get(codename=codename))
    return User.objects.get(pk=user.pk)
