"""The core of a pass: what every recorded operation goes through, whatever its kind.

- ``pass_state``: the pass's state only: the run being replayed, id scopes, the frame;
- ``replay``: the replay decision for one recorded operation, a pure function;
- ``recorded``: the one path every recorded operation takes (reach its id, decide, then
  record, serve or conclude), and the records' writes;
- ``outcome``: how the pass ends (finish, wait, requeue, abandon), written fenced;
- ``crashes``: simulated crashes at a chosen point, for tests;
- ``kinds``: the table of the kinds of recorded operation (step, sleep, wait_for,
  result, gather, start, patched), each declared once: its record name, what wakes it
  if it waits, what a replay serves.
"""
