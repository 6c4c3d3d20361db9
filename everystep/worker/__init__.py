"""The long-running worker: claims due runs and executes them on a thread pool."""

from everystep.worker.loop import Worker

__all__ = ["Worker"]
