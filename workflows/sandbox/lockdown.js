// Lockdown of one V8 context, evaluated once per context by worker.py; the script's value is the driver.
//
// Invariants this file establishes (tests/workflows/test_sandbox.py checks each one):
//   1. Nothing a user can reach is writable: every object reachable from globalThis (and the intrinsics only
//      reachable through syntax, e.g. %GeneratorFunction%) is frozen, globalThis included. So one evaluation
//      cannot leave state for the next: no prototype pollution, no new globals, no replaced built-ins.
//   2. Nothing can run after an evaluation returns: the host timers of mini-racer (setTimeout), and
//      Atomics.waitAsync, FinalizationRegistry and WebAssembly (tasks, GC callbacks, off-heap memory) are removed.
//   3. No built-in remembers data across evaluations: the legacy RegExp statics (RegExp.$1, RegExp.input, ...)
//      held the last match, i.e. another user's data, so they are deleted.
//   4. User code is compiled on its own by the Function constructor (its body is parsed alone, so it cannot close
//      our wrapper and run at script level, where `let` would persist), in strict mode, and is called with freshly
//      parsed input/context. The driver is never reachable from globalThis; user code can name it (a script-level
//      const), and it is frozen with everything it reaches, like the rest (invariant 1).
(function () {
  "use strict";
  const g = globalThis;
  const FunctionConstructor = Function;
  const parse = JSON.parse;
  const stringify = JSON.stringify;
  const StringConstructor = String;
  const defineProperty = Object.defineProperty;
  const ErrorConstructor = Error;
  const SyntaxErrorConstructor = SyntaxError;
  const MESSAGE_CHARS = 1000;

  function removeGlobal(name) {
    // `var` globals (mini-racer's timers) are not configurable: they cannot be deleted, only emptied.
    if (!Reflect.deleteProperty(g, name)) g[name] = undefined;
  }
  ["setTimeout", "clearTimeout", "__timer_manager", "WebAssembly", "SharedArrayBuffer", "Atomics",
   "FinalizationRegistry", "WeakRef"].forEach(removeGlobal);
  ["$1", "$2", "$3", "$4", "$5", "$6", "$7", "$8", "$9", "input", "$_", "lastMatch", "$&", "lastParen", "$+",
   "leftContext", "$`", "rightContext", "$'"].forEach((name) => Reflect.deleteProperty(RegExp, name));

  // A frozen prototype makes `err.name = "X"` or `obj.toString = f` throw (the "override mistake"). For the
  // prototypes user code commonly shadows, turn each data property into an accessor whose setter defines an own
  // property on the receiver, so assignment works on user objects while the prototype itself stays read-only.
  function tameOverrides(proto) {
    for (const key of Reflect.ownKeys(proto)) {
      const desc = Object.getOwnPropertyDescriptor(proto, key);
      if (!("value" in desc) || !desc.writable || !desc.configurable) continue;
      const value = desc.value;
      defineProperty(proto, key, {
        get() { return value; },
        set(newValue) {
          if (this === proto) throw new TypeError("Cannot assign to read only property '" + StringConstructor(key) + "'");
          defineProperty(this, key, { value: newValue, writable: true, enumerable: true, configurable: true });
        },
        enumerable: desc.enumerable,
        configurable: false,
      });
    }
  }
  [Object.prototype, Array.prototype, Function.prototype, Promise.prototype, Error.prototype, EvalError.prototype,
   RangeError.prototype, ReferenceError.prototype, SyntaxError.prototype, TypeError.prototype, URIError.prototype,
   AggregateError.prototype].forEach(tameOverrides);

  function attempt(make) {
    try { return make(); } catch (e) { return undefined; }
  }
  // Intrinsics that no property path from globalThis reaches, only syntax or a returned object.
  const hiddenIntrinsics = [
    () => Object.getPrototypeOf(function* () {}),
    () => Object.getPrototypeOf(async function () {}),
    () => Object.getPrototypeOf(async function* () {}),
    () => Object.getPrototypeOf((function* () {})()),
    () => Object.getPrototypeOf((async function* () {})()),
    () => Object.getPrototypeOf([][Symbol.iterator]()),
    () => Object.getPrototypeOf(new Map()[Symbol.iterator]()),
    () => Object.getPrototypeOf(new Set()[Symbol.iterator]()),
    () => Object.getPrototypeOf(""[Symbol.iterator]()),
    () => Object.getPrototypeOf(/a/[Symbol.matchAll]("")),
    () => Object.getPrototypeOf([].values().map((x) => x)),
    () => Object.getPrototypeOf(Iterator.from({ next() { return { done: true }; } })),
    () => Object.getPrototypeOf(new Intl.Segmenter().segment("a")),
    () => Object.getPrototypeOf(new Intl.Segmenter().segment("a")[Symbol.iterator]()),
    () => Object.getOwnPropertyDescriptor((function () { "use strict"; return arguments; })(), "callee").get,
    () => Object.getPrototypeOf(Uint8Array),
  ].map(attempt);

  function deepFreeze(roots) {
    const seen = new Set();
    const pending = roots.filter((x) => x !== undefined);
    while (pending.length > 0) {
      const object = pending.pop();
      if ((typeof object !== "object" && typeof object !== "function") || object === null || seen.has(object)) continue;
      seen.add(object);
      Object.freeze(object);
      pending.push(Object.getPrototypeOf(object));
      for (const key of Reflect.ownKeys(object)) {
        const desc = Reflect.getOwnPropertyDescriptor(object, key);
        if (desc !== undefined) pending.push(desc.value, desc.get, desc.set);
      }
    }
    return seen.size;
  }
  deepFreeze([g, ...hiddenIntrinsics]);

  function describe(thrown) {
    try {
      if (typeof thrown === "object" && thrown !== null && !(thrown instanceof ErrorConstructor)) {
        const json = stringify(thrown);
        if (json !== undefined) return json.slice(0, MESSAGE_CHARS);
      }
      return StringConstructor(thrown).slice(0, MESSAGE_CHARS);
    } catch (e) {
      return "an exception that cannot be shown as text";
    }
  }

  function compile(kind, source) {
    if (kind === "condition") {
      // A second wrapper with other brackets: text like `1); doEvil(); (1` fits one wrapper, never both, so a
      // condition is exactly one expression.
      new FunctionConstructor("input", "context", '"use strict"; return [\n' + source + "\n];");
      return new FunctionConstructor("input", "context", '"use strict"; return (\n' + source + "\n);");
    }
    return new FunctionConstructor("input", "context", '"use strict";' + source);
  }

  function encode(result) {
    if (result === undefined) return "u";
    let json;
    try {
      if ((typeof result === "object" || typeof result === "function") && result !== null && typeof result.then === "function") {
        return "nThe code returned a Promise; code nodes are synchronous, return the value itself.";
      }
      json = stringify(result);
    } catch (e) {
      return "n" + describe(e);
    }
    if (json === undefined) return "nThe code returned a " + typeof result + ".";
    return "v" + json;
  }

  // The worker's only entry point. Answers are one tag character and a payload:
  //   "" compiled | "s" syntax error | "e" thrown error | "t"/"f" condition | "u" undefined | "v" JSON | "n" not JSON
  function drive(operation, kind, source, inputJson, contextJson) {
    let compiled;
    try {
      compiled = compile(kind, source);
    } catch (e) {
      return (e instanceof SyntaxErrorConstructor ? "s" : "e") + describe(e);
    }
    if (operation === "compile") return "";
    let result;
    try {
      result = compiled(parse(inputJson), parse(contextJson));
    } catch (e) {
      return "e" + describe(e);
    }
    if (kind === "condition") return result ? "t" : "f";
    return encode(result);
  }
  // User code reaches the driver by its script-level name (a const: the binding cannot change, but the function
  // object and its .prototype could), so it is frozen like everything else user code can reach.
  deepFreeze([drive]);
  return drive;
})();
