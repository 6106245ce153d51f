"""LLVM's machine scheduler, a process-wide option, turned off for the code generations that ask
(silvanforge_target_cpu.llvm_host._machine_scheduler): a generation wanting the other setting
waits for those running, none of the running setting joins while it waits, and the option is on
again when the last one off ends."""

from __future__ import annotations

import threading
import time

from silvanforge_target_cpu import llvm_host
from silvanforge_target_cpu.llvm_host import _machine_scheduler, _Scheduling


def test_a_waiting_setting_is_not_held_off_by_later_arrivals(monkeypatch):
    said = []
    monkeypatch.setattr(llvm_host.llvm, "set_option", lambda _, option: said.append(option))
    order = []
    first_in, release = threading.Event(), threading.Event()

    def hold(on: bool, name: str, until: threading.Event | None = None):
        with _machine_scheduler(on):
            order.append(name)
            if until is not None:
                first_in.set()
                until.wait(5)

    first = threading.Thread(target=hold, args=(False, "off first", release))
    first.start()
    assert first_in.wait(5)
    on = threading.Thread(target=hold, args=(True, "on"))
    on.start()
    deadline = time.monotonic() + 5
    while not _Scheduling.waiting[True] and time.monotonic() < deadline:
        time.sleep(0.001)
    late = threading.Thread(target=hold, args=(False, "off later"))
    late.start()
    time.sleep(0.05)
    assert order == ["off first"]  # (neither the other setting nor a later same-setting one joined)
    release.set()
    for t in (first, on, late):
        t.join(5)
    assert order == ["off first", "on", "off later"]
    assert said[0] == "-enable-misched=0" and said[-1] == "-enable-misched=1"
    assert _Scheduling.on and not _Scheduling.users and not any(_Scheduling.waiting.values())
