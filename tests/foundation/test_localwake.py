"""agentsite.core.localwake: a ring from another process ends a wait at once, a ring sent while the sleeper was
busy ends its next wait, with no ring a wait lasts its timeout, and one process at a time holds a doorbell."""

from __future__ import annotations

import multiprocessing
import secrets
import subprocess
import sys
import time

import pytest
from django.db import connection, transaction

from agentsite.core import localwake
from agentsite.core.localwake import Doorbell

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def bell():
    bell = Doorbell(f"test-{secrets.token_hex(4)}")
    yield bell
    bell.close()


@pytest.mark.e2e
def test_a_ring_from_another_process_ends_the_wait_at_once(bell):
    assert bell.listen()
    # A process of its own, with nothing of this one: only the address is shared.
    ringer = subprocess.Popen([sys.executable, "-c", (
        "import socket, sys, time; time.sleep(0.3); "
        "s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); s.sendto(b'', bytes.fromhex(sys.argv[1]))"),
        bell.address().hex()])
    try:
        started = time.monotonic()
        assert bell.wait(10.0)
        waited = time.monotonic() - started
    finally:
        ringer.wait(10)
    assert waited < 5.0, f"the wait ended {waited:.2f} s after it began, not at the ring"


def test_rings_sent_while_busy_end_the_next_wait_and_one_wait_takes_them_all(bell):
    assert bell.listen()
    for _ in range(5):
        bell.ring()
    started = time.monotonic()
    assert bell.wait(5.0)
    assert time.monotonic() - started < 1.0
    assert not bell.wait(0.2), "the later rings were left for another wait"


def test_with_no_ring_a_wait_lasts_its_timeout(bell):
    assert bell.listen()
    started = time.monotonic()
    assert not bell.wait(0.4)
    assert 0.35 <= time.monotonic() - started < 3.0


def test_a_ring_inside_a_transaction_waits_for_the_commit(bell):
    assert bell.listen()
    with transaction.atomic():
        bell.ring_on_commit()
        assert not bell.wait(0.2), "rang before the change was committed"
    assert bell.wait(2.0)


def test_one_process_at_a_time_holds_a_doorbell(bell):
    other = Doorbell(bell.name)  # the same doorbell, as another process would name it
    assert other.address() == bell.address()
    assert bell.listen()
    assert not other.listen(), "two sleepers held one doorbell"
    started = time.monotonic()
    assert not other.wait(0.3)  # without it: the timeout, not an error
    assert time.monotonic() - started >= 0.25
    other.close()
    bell.close()
    assert other.listen(), "a doorbell given up could not be taken again"
    other.close()


def _child_holds(bell: Doorbell, answer) -> None:
    answer.put(bell.listen())


def test_a_process_forked_from_the_holder_does_not_hold_it(bell):
    assert bell.listen()
    context = multiprocessing.get_context("fork")
    answer = context.Queue()
    connection.close()  # the child gets no share of this process's database connection
    child = context.Process(target=_child_holds, args=(bell, answer))
    child.start()
    child.join(10)
    assert answer.get(timeout=5) is False
    bell.ring()
    assert bell.wait(2.0), "the holder lost its doorbell to the child"


def test_names_and_databases_give_different_doorbells(bell):
    assert Doorbell(bell.name + "-other").address() != bell.address()
    assert bell.address().startswith(localwake.PREFIX)


def test_only_a_database_of_this_host_has_doorbells():
    assert localwake.available() is (connection.vendor == "sqlite")
