"""Workflows that publish progress from their body and from a step, sync and async."""

from everystep import publish, step, workflow


@step
def pack(item: str) -> str:
    publish("packing", item)
    return f"packed {item}"


@workflow
def ship(items: list[str]) -> list[str]:
    publish("stage", "started")
    done = [pack(item) for item in items]
    publish("stage", "done")
    return done


@step
async def weigh(item: str) -> int:
    publish("weighing", item)
    return len(item)


@workflow
async def aship(items: list[str]) -> int:
    publish("stage", "started")
    total = 0
    for item in items:
        total += await weigh(item)
    publish("stage", "done")
    return total
