"""``everystep_worker --processes N`` (issue 56): one supervisor and N worker processes,
one worker to the outside. Real processes and signals, on every database: each child
holds one run at a step waiting for a gate file, so every child has a run in flight."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

import everystep
from everystep.models import Runner, Status, Step, Workflow
from tests.acceptance.conftest import free_port, http_get, wait_until
from tests.testapp import workflows as wf
from tests.testapp.models import Execution

pytestmark = [pytest.mark.django_db(transaction=True)]

# No orphan recovery: a run can only be resumed by a process under its own name.
GROUP = ("--processes", "2", "--pool", "1", "--poll", "0.05", "--orphan-timeout", "0")


def at_gates(runs: list[Workflow], gate: Path) -> None:
    """Wait until each of ``runs`` waits at ``gate``."""
    wait_until(
        lambda: Execution.objects.filter(step__endswith=":gate").count() >= len(runs),
        60,
        "every run to wait at its gate",
    )


def gated_runs(count: int, gate: Path) -> list[Workflow]:
    return [everystep.schedule(wf.gated, f"r{i}", str(gate)) for i in range(count)]


def holder_pids(label: str) -> list[int]:
    return list(Execution.objects.filter(step=f"{label}:gate").values_list("pid", flat=True))


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def children_of(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rpartition(")")[2].split()[1]) == pid:
                        found.append(int(entry))
            except OSError:
                continue
    return found


def test_a_killed_child_is_restarted_and_its_run_resumed_and_the_port_speaks_for_all(
    workers, tmp_path
):
    port = free_port()
    group = workers(
        "grp", *GROUP, "--metrics-port", str(port), env={"EVERYSTEP_TEST_LOG_JSON": "1"}
    )
    gate = tmp_path / "gate"
    runs = gated_runs(2, gate)
    at_gates(runs, gate)
    first, second = holder_pids("r0")[0], holder_pids("r1")[0]
    assert first != second and {first, second} <= set(children_of(group.pid)), "one run each"
    assert set(Runner.objects.values_list("name", flat=True)) >= {"grp", "grp/1"}

    # One scrape: the children's gauges under the group's name, summed.
    status, text = http_get(port, "/metrics")
    assert status == 200
    assert 'everystep_worker_inflight{runner="grp"} 2.0' in text, text
    assert 'everystep_worker_pool_size{runner="grp"} 2.0' in text
    assert 'runner="grp/1"' not in text
    assert http_get(port, "/readyz")[0] == 200 and http_get(port, "/healthz")[0] == 200

    # A wedged child (stopped: it answers nothing) turns both probes red.
    os.kill(first, signal.SIGSTOP)
    status, body = http_get(port, "/readyz")
    assert status == 503, body
    assert [child["ok"] for child in json.loads(body)["processes"]].count(False) == 1
    assert http_get(port, "/healthz")[0] == 503

    # Killed mid-step: restarted, its run resumed from its records under its name.
    killed_name = Workflow.objects.get(id=runs[0].id).claimed_by
    killed_at = time.monotonic()
    os.kill(first, signal.SIGKILL)
    wait_until(lambda: len(holder_pids("r0")) == 2, 60, "the killed child's run to resume")
    resumed_after = time.monotonic() - killed_at
    print(f"the killed child's run resumed its step after {resumed_after:.2f}s")
    assert holder_pids("r0")[1] not in (first, second), "resumed by the new child"
    wait_until(lambda: http_get(port, "/readyz")[0] == 200, 30, "readiness to be back")
    gate.touch()
    wait_until(
        lambda: all(Workflow.objects.get(id=r.id).status == Status.COMPLETED for r in runs),
        60,
        "both runs to complete",
    )
    for run in runs:
        steps = list(Step.objects.filter(workflow_id=run.id).values_list("step_id", flat=True))
        assert len(steps) == 3 and len(set(steps)) == 3, "no step recorded twice"
    assert Execution.objects.filter(step="r0:a").count() == 1, "the step before ran once"
    status, text = http_get(port, "/metrics")
    completed = 'status="completed",workflow="tests.testapp.workflows.gated"'
    assert f"everystep_workflow_runs_total{{{completed}}} 2.0" in text, "summed over both"

    group.signal(signal.SIGTERM)
    assert group.wait(60) == 0
    log = group.log()
    assert "was killed by SIGKILL" in log and "started again now" in log
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    writers = {line.get("worker_process") for line in lines}
    assert writers == {"supervisor", 0, 1}, "each line says which process wrote it"
    index = 0 if killed_name == "grp" else 1
    assert any(
        (line.get("event"), line.get("runner"), line.get("worker_process"))
        == ("worker.catchup", killed_name, index)
        for line in lines
    ), "the restarted child caught up the runs under its name"


@pytest.mark.parametrize("signals", [1, 2], ids=["sigterm", "sigterm-twice"])
def test_sigterm_drains_every_child_and_exits_0(workers, tmp_path, signals):
    group = workers("grp", *GROUP, "--drain", "60")
    gate = tmp_path / "gate"
    runs = gated_runs(2, gate)
    at_gates(runs, gate)
    children = children_of(group.pid)
    assert len(children) == 2
    group.signal(signal.SIGTERM)
    if signals == 2:
        time.sleep(0.5)
        group.signal(signal.SIGTERM)  # the runs are requeued without their steps ending
    else:
        wait_until(lambda: Runner.objects.filter(draining=True).count() == 2, 30, "both to drain")
        gate.touch()  # the steps end: recorded, then the runs requeued at the boundary
    assert group.wait(60) == 0
    assert not any(alive(pid) for pid in children)
    for run in runs:
        run.refresh_from_db()
        assert (run.status, run.claimed_by) == (Status.SCHEDULED, None), "requeued"
        done = Step.objects.filter(workflow_id=run.id).count()
        assert done == (2 if signals == 1 else 1), "the step in flight recorded only if it ended"
    assert not Runner.objects.exists(), "every child removed its heartbeat row"


def test_a_killed_supervisor_takes_its_children_along_and_the_next_group_resumes(workers, tmp_path):
    group = workers("grp", *GROUP)
    gate = tmp_path / "gate"
    runs = gated_runs(2, gate)
    at_gates(runs, gate)
    children = children_of(group.pid)
    group.signal(signal.SIGKILL)
    group.wait(30)
    wait_until(lambda: not any(alive(pid) for pid in children), 10, "the children to exit")
    held = set(Workflow.objects.values_list("status", "claimed_by"))
    assert held == {(Status.RUNNING, "grp"), (Status.RUNNING, "grp/1")}
    gate.touch()
    again = workers("grp", *GROUP)
    wait_until(
        lambda: all(Workflow.objects.get(id=r.id).status == Status.COMPLETED for r in runs),
        60,
        "the next group under the name to finish both runs",
    )
    assert again.log().count("parked under its name") == 2
    again.signal(signal.SIGTERM)
    assert again.wait(60) == 0


def test_a_run_that_kills_every_child_taking_it_is_failed_at_the_recovery_limit(workers):
    """A crash loop: the child is restarted (sooner, then later), catches the run up and
    dies again, until the run is failed past EVERYSTEP_MAX_RECOVERIES; the group lives."""
    from tests.testapp import killer_tasks

    result = killer_tasks.kill_worker.enqueue()
    env = {
        "DJANGO_SETTINGS_MODULE": "tests.testapp.site.settings",
        "EVERYSTEP_TEST_WORKFLOW_MODULES": "tests.testapp.killer_tasks",
        "EVERYSTEP_TEST_MAX_RECOVERIES": "2",
    }
    group = workers("grp", *GROUP, env=env)
    wait_until(
        lambda: Workflow.objects.get(id=result.id).status == Status.FAILED, 60, "the failure"
    )
    run = Workflow.objects.get(id=result.id)
    assert run.recoveries == 3 and "EVERYSTEP_MAX_RECOVERIES = 2" in run.error["message"]
    log = group.log()
    assert log.count("exited with code 1 after") == 3, log
    assert "started again in 0.25s (2 quick deaths in a row)" in log
    group.signal(signal.SIGTERM)
    assert group.wait(60) == 0


def test_a_group_under_a_live_workers_name_stops_with_exit_1(workers):
    holder = workers("grp", "--heartbeat", "0.5", "--poll", "0.05")
    wait_until(lambda: Runner.objects.filter(name="grp").exists(), 60, "the holder's row")
    group = workers("grp", *GROUP)
    group.expect_alive = False
    assert group.wait(60) == 1
    log = group.log()
    assert "runner name 'grp' is in use by a live worker" in log
    assert "could not work under the name 'grp'" in log and "every process stops" in log
    assert Runner.objects.get(name="grp").pid == holder.pid, "the holder keeps its name"
    holder.signal(signal.SIGTERM)
    assert holder.wait(60) == 0
