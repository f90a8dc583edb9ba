"""Nothing one evaluation writes, anywhere it can reach, is visible to the next evaluation on the same worker.

The walk starts from everything user code can name or make with syntax: globalThis, the driver (a script-level
const that code can name), and the intrinsics only syntax reaches (generator and async function prototypes,
iterator prototypes, %ThrowTypeError%, ...). It follows prototypes and every property descriptor (values,
getters, setters) without calling a getter. A vandal evaluation tries every kind of write on every object it
reaches; the next evaluation's fingerprint of the whole graph must equal the one taken before.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from workflows.sandbox import SandboxError, SandboxPool
from workflows.sandbox.worker import DRIVER

WALK = """
const roots = [globalThis, %(driver)s];
for (const make of [
    () => Object.getPrototypeOf(function* () {}),
    () => Object.getPrototypeOf(async function () {}),
    () => Object.getPrototypeOf(async function* () {}),
    // A generator's own prototype is new with each generator function; the shared one is a step further up.
    () => Object.getPrototypeOf(Object.getPrototypeOf((function* () {})())),
    () => Object.getPrototypeOf(Object.getPrototypeOf((async function* () {})())),
    () => Object.getPrototypeOf((async () => {})()),
    () => Object.getPrototypeOf([][Symbol.iterator]()),
    () => Object.getPrototypeOf(new Map()[Symbol.iterator]()),
    () => Object.getPrototypeOf(new Set()[Symbol.iterator]()),
    () => Object.getPrototypeOf(''[Symbol.iterator]()),
    () => Object.getPrototypeOf(/a/[Symbol.matchAll]('')),
    () => Object.getPrototypeOf([].values().map((x) => x)),
    () => Object.getPrototypeOf(Iterator.from({next() { return {done: true}; }})),
    () => Object.getPrototypeOf(new Intl.Segmenter().segment('a')),
    () => Object.getPrototypeOf(new Intl.Segmenter().segment('a')[Symbol.iterator]()),
    () => Object.getOwnPropertyDescriptor((function () { 'use strict'; return arguments; })(), 'callee').get,
    () => Object.getPrototypeOf(Uint8Array),
]) {
    try { roots.push(make()); } catch (e) {}
}
const order = [];
const index = new Map();
const pending = roots.slice();
while (pending.length > 0) {
    const object = pending.shift();
    if ((typeof object !== 'object' && typeof object !== 'function') || object === null || index.has(object)) continue;
    index.set(object, order.length);
    order.push(object);
    pending.push(Reflect.getPrototypeOf(object));
    for (const key of Reflect.ownKeys(object)) {
        const desc = Reflect.getOwnPropertyDescriptor(object, key);
        if (desc !== undefined) pending.push(desc.value, desc.get, desc.set);
    }
}
"""

FINGERPRINT = WALK + """
const describe = (value) => {
    if ((typeof value === 'object' && value !== null) || typeof value === 'function') return '#' + index.get(value);
    if (typeof value === 'symbol') return 'symbol:' + String(value);
    return typeof value + ':' + String(value);
};
const lines = order.map((object) => {
    const parts = [describe(Reflect.getPrototypeOf(object)), Reflect.isExtensible(object) ? 'open' : 'closed'];
    for (const key of Reflect.ownKeys(object)) {
        const d = Reflect.getOwnPropertyDescriptor(object, key);
        parts.push(String(key) + ('value' in d ? '=' + describe(d.value) + (d.writable ? 'w' : '')
                                               : '=get' + describe(d.get) + '/set' + describe(d.set))
                   + (d.configurable ? 'c' : '') + (d.enumerable ? 'e' : ''));
    }
    return parts.join(',');
});
return {objects: order.length, open: order.filter((o) => Reflect.isExtensible(o)).length, text: lines.join('\\n')};
"""

VANDAL = WALK + """
const marker = 'vandal_' + input;
let done = 0;
for (const object of order) {
    const attempts = [
        () => Reflect.set(object, marker, input),
        () => Reflect.defineProperty(object, marker, {value: input, writable: true, configurable: true}),
        () => Reflect.setPrototypeOf(object, {marker}),
    ];
    for (const key of Reflect.ownKeys(object)) {
        const d = Reflect.getOwnPropertyDescriptor(object, key);
        if (d !== undefined && 'value' in d) attempts.push(() => Reflect.set(object, key, input));
        attempts.push(() => Reflect.defineProperty(object, key, {value: input}));
        attempts.push(() => Reflect.deleteProperty(object, key));
    }
    for (const attempt of attempts) {
        try { if (attempt()) done++; } catch (e) {}
    }
}
return done;
"""


@pytest.fixture
def single() -> Iterator[SandboxPool]:
    pool = SandboxPool(size=1, time_limit_s=5)
    yield pool
    pool.close()


def fingerprint(pool: SandboxPool) -> dict[str, object]:
    return pool.run_code_sync(FINGERPRINT % {"driver": DRIVER})


def test_everything_user_code_can_reach_is_closed_to_new_properties(single: SandboxPool) -> None:
    seen = fingerprint(single)
    assert seen["objects"] > 1000, "the walk must cover the built-ins"
    assert seen["open"] == 0


def test_writes_anywhere_reachable_are_not_visible_to_the_next_evaluation(single: SandboxPool) -> None:
    before = fingerprint(single)
    [pid] = single.worker_pids()
    try:
        single.run_code_sync(VANDAL % {"driver": DRIVER}, input="the first user's data")
    except SandboxError as error:
        assert error.kind == "error", error  # refused, not a crash
    after = fingerprint(single)
    assert single.worker_pids() == [pid], "the same worker and V8 context must have served all three"
    assert "the first user's data" not in after["text"]
    assert after == before


def test_the_driver_keeps_no_property_user_code_set_on_it(single: SandboxPool) -> None:
    for write in (f"{DRIVER}.leak = input", f"{DRIVER}.prototype.leak = input",
                  f"Object.defineProperty({DRIVER}, 'leak', {{value: input}})"):
        with pytest.raises(SandboxError) as caught:
            single.run_code_sync(write, input="secret")
        assert caught.value.kind == "error"
    assert single.run_code_sync(f"return [typeof {DRIVER}.leak, typeof {DRIVER}.prototype]") == [
        "undefined", "object"]
