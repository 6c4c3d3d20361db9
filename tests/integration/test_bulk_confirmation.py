"""A UI confirmation is bound to its user and to what it confirms, and acts once (issue 50,
item 7): two POSTs of one bulk confirmation at the same moment make one audit entry; the
same confirmation sent with another filter, or by another user, is an action of its own,
never a replay of the first one nor masked by it."""

from __future__ import annotations

import html as htmllib
import re
import threading
from datetime import timedelta
from typing import Any

import pytest
from django.db import connections
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from everystep import conf, schedule
from everystep.models import AuditEntry, Status, Workflow, uuid7
from everystep.store.audit import Actor
from everystep.store.runs import cancel_run
from tests.staff import staff_user
from tests.testapp import recovery_workflows as rwf

pytestmark = pytest.mark.django_db(transaction=True)


def make_runs(name: str, count: int) -> None:
    """``count`` scheduled runs due tomorrow: no test worker takes them."""
    later = timezone.now() + timedelta(days=1)
    Workflow.objects.bulk_create(
        Workflow(id=uuid7(), name=name, args=[], due_at=later) for _ in range(count)
    )


def signed_in(*perms: str, name: str = "operator") -> Client:
    client = Client()
    client.force_login(staff_user(*perms, name=name))
    return client


def confirm_form(client: Client, action: str, **filters: str) -> tuple[str, str]:
    """The confirm page's POST URL and its form's confirmation."""
    query = "&".join(f"{key}={value}" for key, value in {"action": action, **filters}.items())
    page = client.get(f"{reverse('everystep:bulk')}?{query}").content.decode()
    (post,) = re.findall(r'<form method="post" action="([^"]+)"', page)
    (nonce,) = re.findall(r'name="confirm" value="([0-9a-f]{32})"', page)
    return htmllib.unescape(post), nonce


def entries() -> list[AuditEntry]:
    return list(AuditEntry.objects.filter(action="bulk_cancel").order_by("id"))


def cancelled(name: str) -> int:
    return Workflow.objects.filter(name=name, status=Status.CANCELLED).count()


def post_together(clients: list[Client], post: str, nonce: str) -> list[Any]:
    """Each client POSTs the form on a thread of its own. Each thread, once it has looked
    the confirmation up and found nothing, waits for the other to have done the same:
    both pass the look-up before either writes, whatever the scheduling."""
    barrier = threading.Barrier(len(clients), timeout=60)
    responses: list[Any] = [None] * len(clients)
    errors: list[BaseException] = []

    def after_lookup(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        result = execute(sql, params, many, context)
        if not looked_up.done and "everystep_auditentry" in sql and "confirmation" in sql:
            looked_up.done = True
            barrier.wait()
        return result

    looked_up = threading.local()

    def send(index: int) -> None:
        looked_up.done = False
        try:
            with connections[conf.database()].execute_wrapper(after_lookup):
                responses[index] = clients[index].post(post, {"confirm": nonce})
        except BaseException as exc:  # handed to the test thread
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(clients))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    return responses


def test_two_concurrent_posts_of_one_confirmation_make_one_entry():
    """Two POSTs of one inline bulk cancel's form, both past the look-up before either
    writes: the runs are cancelled once, one bulk_cancel entry counts them all, and both
    POSTs go back to the runs list."""
    make_runs("conf.a", 30)
    user = staff_user("cancel_workflow")
    first, second = Client(), Client()
    first.force_login(user)
    second.force_login(user)
    post, nonce = confirm_form(first, "cancel", workflow="conf.a")
    responses = post_together([first, second], post, nonce)
    assert [response.status_code for response in responses] == [302, 302]
    assert all("bulk=cancel" in response["Location"] for response in responses)
    assert cancelled("conf.a") == 30
    (entry,) = entries()
    assert (entry.count, entry.actor) == (30, "operator")


def test_a_confirmation_sent_with_another_filter_is_a_new_action():
    """The confirmation of a cancel of conf.a, sent with the filter conf.b: conf.b's runs
    are cancelled under an entry of their own, and conf.a's POST still acts once."""
    make_runs("conf.a", 3)
    make_runs("conf.b", 4)
    client = signed_in("cancel_workflow")
    post, nonce = confirm_form(client, "cancel", workflow="conf.a")
    client.post(post, {"confirm": nonce})
    client.post(post.replace("conf.a", "conf.b"), {"confirm": nonce})
    client.post(post, {"confirm": nonce})
    assert (cancelled("conf.a"), cancelled("conf.b")) == (3, 4)
    assert [(e.filter, e.count) for e in entries()] == [
        ({"workflow": "conf.a"}, 3),
        ({"workflow": "conf.b"}, 4),
    ]


def test_a_confirmation_sent_by_another_user_is_that_users_action():
    """Bob sending Alice's confirmation is not sent back to what Alice did: his POST is
    his own action, in an entry naming him."""
    make_runs("conf.a", 3)
    alice = signed_in("cancel_workflow", name="alice")
    bob = signed_in("cancel_workflow", name="bob")
    post, nonce = confirm_form(alice, "cancel", workflow="conf.a")
    alice.post(post, {"confirm": nonce})
    response = bob.post(post, {"confirm": nonce})
    assert "count=0" in response["Location"]
    assert [(e.actor, e.count) for e in entries()] == [("alice", 3), ("bob", 0)]


def test_a_fork_confirmation_is_bound_to_its_user_and_step():
    """The run page's fork form sent twice by one user forks once; the same confirmation
    sent by another user forks again, as that user's fork."""
    run = cancel_run(str(schedule(rwf.checkout, 1, 100).id), actor=Actor("operator", "ui"))
    alice = signed_in("fork_workflow", name="alice")
    bob = signed_in("fork_workflow", name="bob")
    post = reverse("everystep:run-action", args=[run.id])
    form = {"action": "fork", "confirm": "c" * 32}
    alice.post(post, form)
    alice.post(post, form)
    assert Workflow.objects.filter(forked_from=run).count() == 1
    bob.post(post, form)
    assert Workflow.objects.filter(forked_from=run).count() == 2
    forks = AuditEntry.objects.filter(action="fork").order_by("id")
    assert list(forks.values_list("actor", flat=True)) == ["alice", "bob"]
