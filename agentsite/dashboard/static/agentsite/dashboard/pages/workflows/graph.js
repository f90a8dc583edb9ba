// The drawn graph of a workflow: nodes at their stored positions, edges between them, drag to move,
// drag from a node's out-port to another node to connect, keyboard moves and opens nodes.
//
// This module owns no data: the editor gives it the document on every change (render) and hears back
// through callbacks. Node states during a run (running/done/error) and validation problems are classes
// on the node's <g>, so that CSS and tests see the same thing.

const SVG = "http://www.w3.org/2000/svg";
export const NODE_W = 168;
export const NODE_H = 58;
const MARGIN = 40;
const STEP = 10;
const BIG_STEP = 50;

function svg(tag, attrs = {}, ...children) {
  const element = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") element.addEventListener(key.slice(2), value);
    else element.setAttribute(key, String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    element.append(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return element;
}

function clip(text, length) {
  const value = String(text ?? "");
  return value.length > length ? `${value.slice(0, length - 1)}…` : value;
}

// Every edge the engine follows: the listed ones, and a condition's branches (which imply an edge).
export function drawnEdges(doc) {
  const seen = new Set(doc.edges.map((edge) => `${edge.from}->${edge.to}`));
  const edges = doc.edges.map((edge) => ({ ...edge, implied: false, label: branchLabel(doc, edge) }));
  for (const node of doc.nodes) {
    if (node.type !== "condition") continue;
    for (const [key, label] of [["trueBranch", "true"], ["falseBranch", "false"]]) {
      const target = node.config?.[key];
      if (typeof target !== "string" || seen.has(`${node.id}->${target}`)) continue;
      seen.add(`${node.id}->${target}`);
      edges.push({ from: node.id, to: target, implied: true, label });
    }
  }
  return edges;
}

function branchLabel(doc, edge) {
  const source = doc.nodes.find((node) => node.id === edge.from);
  if (source?.type !== "condition") return "";
  if (source.config?.trueBranch === edge.to) return "true";
  if (source.config?.falseBranch === edge.to) return "false";
  return "";
}

// Nodes stacked on one spot (made through the API without positions) are laid out in columns by their
// distance from the input node, so that each can be seen and grabbed.
export function arrange(doc) {
  const depth = new Map();
  const start = doc.nodes.find((node) => node.type === "input") || doc.nodes[0];
  if (!start) return doc;
  const following = new Map(doc.nodes.map((node) => [node.id, []]));
  for (const edge of drawnEdges(doc)) following.get(edge.from)?.push(edge.to);
  const queue = [start.id];
  depth.set(start.id, 0);
  while (queue.length) {
    const id = queue.shift();
    for (const next of following.get(id) || []) {
      if (!depth.has(next)) {
        depth.set(next, depth.get(id) + 1);
        queue.push(next);
      }
    }
  }
  let unreached = Math.max(0, ...depth.values()) + 1;
  const rows = new Map();
  const nodes = doc.nodes.map((node) => {
    const column = depth.has(node.id) ? depth.get(node.id) : unreached++;
    const row = rows.get(column) || 0;
    rows.set(column, row + 1);
    return { ...node, position: { x: 40 + column * (NODE_W + 72), y: 40 + row * (NODE_H + 40) } };
  });
  return { ...doc, nodes };
}

export function overlapping(doc) {
  const spots = new Set(doc.nodes.map((node) => `${Math.round(node.position?.x ?? 0)},${Math.round(node.position?.y ?? 0)}`));
  return doc.nodes.length > 1 && spots.size < doc.nodes.length;
}

// A free spot for a new node: right of the selected node, or right of everything.
export function freeSpot(doc, near) {
  const base = near ? { x: near.position.x + NODE_W + 72, y: near.position.y }
    : { x: 40 + Math.max(-NODE_W - 32, ...doc.nodes.map((node) => node.position.x)) + NODE_W + 32, y: 40 };
  const spot = { ...base };
  const taken = (x, y) => doc.nodes.some((node) => Math.abs(node.position.x - x) < NODE_W && Math.abs(node.position.y - y) < NODE_H);
  while (taken(spot.x, spot.y)) spot.y += NODE_H + 30;
  return spot;
}

/**
 * Draw the graph into `host` (an element that scrolls). Callbacks:
 * onMove(id, position, final) - a node moved (final: the drag ended or a key was released);
 * onOpen(id) - open the node's form; onSelect(id|null); onConnect(fromId, toId); onDisconnect(fromId, toId).
 */
export function createGraph(host, callbacks) {
  let doc = { nodes: [], edges: [] };
  let scale = 1;
  let selected = null;
  let states = new Map(); // node name -> {state, text}
  let problems = new Map(); // node id -> [message]
  let edgeProblems = new Map(); // "from->to" -> [message]
  // While a node is dragged, a new document (say, a save's answer) would redraw the node under the pointer
  // and end the drag: it waits, and the editor draws its document again when the drag ends.
  let dragging = false;
  const svgRoot = svg("svg", { class: "wf-graph", role: "group", "aria-label": "Workflow graph" });
  const defs = svg("defs", {},
    svg("marker", { id: "wf-arrow", viewBox: "0 0 10 10", refX: "9", refY: "5", markerWidth: "8", markerHeight: "8",
      orient: "auto-start-reverse" }, svg("path", { d: "M0,0 L10,5 L0,10 z", class: "wf-arrow" })));
  const edgeLayer = svg("g", { class: "wf-edges" });
  const nodeLayer = svg("g", { class: "wf-nodes" });
  const rubber = svg("path", { class: "wf-rubber", d: "" });
  svgRoot.append(defs, edgeLayer, nodeLayer, rubber);
  host.append(svgRoot);

  function bounds() {
    const xs = doc.nodes.map((node) => node.position.x);
    const ys = doc.nodes.map((node) => node.position.y);
    const minX = Math.min(0, ...xs) - MARGIN;
    const minY = Math.min(0, ...ys) - MARGIN;
    const maxX = Math.max(320, ...xs.map((x) => x + NODE_W)) + MARGIN;
    const maxY = Math.max(160, ...ys.map((y) => y + NODE_H)) + MARGIN;
    return { minX, minY, width: maxX - minX, height: maxY - minY };
  }

  function fit() {
    const box = bounds();
    svgRoot.setAttribute("viewBox", `${box.minX} ${box.minY} ${box.width} ${box.height}`);
    svgRoot.setAttribute("width", String(Math.round(box.width * scale)));
    svgRoot.setAttribute("height", String(Math.round(box.height * scale)));
  }

  function toGraph(event) {
    const point = svgRoot.createSVGPoint();
    point.x = event.clientX;
    point.y = event.clientY;
    return point.matrixTransform(svgRoot.getScreenCTM().inverse());
  }

  function edgePath(from, to) {
    const x1 = from.position.x + NODE_W;
    const y1 = from.position.y + NODE_H / 2;
    const x2 = to.position.x;
    const y2 = to.position.y + NODE_H / 2;
    const bend = Math.max(40, Math.abs(x2 - x1) / 2);
    return `M${x1},${y1} C${x1 + bend},${y1} ${x2 - bend},${y2} ${x2},${y2}`;
  }

  function drawEdges() {
    edgeLayer.replaceChildren();
    const byId = new Map(doc.nodes.map((node) => [node.id, node]));
    for (const edge of drawnEdges(doc)) {
      const from = byId.get(edge.from);
      const to = byId.get(edge.to);
      if (!from || !to) continue;
      const key = `${edge.from}->${edge.to}`;
      const d = edgePath(from, to);
      const invalid = edgeProblems.has(key);
      const name = `Edge ${from.name} to ${to.name}${edge.label ? ` (${edge.label})` : ""}${edge.implied ? ", a condition branch" : ""}`;
      const group = svg("g", {
        class: `wf-edge${edge.implied ? " implied" : ""}${invalid ? " invalid" : ""}`,
        "data-from": edge.from, "data-to": edge.to, tabindex: edge.implied ? null : "0",
        role: edge.implied ? null : "button", "aria-label": edge.implied ? null : `${name}. Press Delete to remove it.`,
        onkeydown: (event) => {
          if (!edge.implied && (event.key === "Delete" || event.key === "Backspace")) {
            event.preventDefault();
            callbacks.onDisconnect(edge.from, edge.to);
          }
        },
      },
      svg("title", {}, invalid ? `${name}: ${edgeProblems.get(key).join(" ")}` : name),
      svg("path", { class: "wf-edge-hit", d }),
      svg("path", { class: "wf-edge-line", d, "marker-end": "url(#wf-arrow)" }));
      if (edge.label) {
        group.append(svg("text", { class: "wf-edge-label", x: (from.position.x + NODE_W + to.position.x) / 2,
          y: (from.position.y + to.position.y + NODE_H) / 2 - 6, "text-anchor": "middle" }, edge.label));
      }
      edgeLayer.append(group);
    }
  }

  function nodeClasses(node) {
    const classes = ["wf-node", `type-${node.type}`];
    const state = states.get(node.name)?.state;
    if (state) classes.push(state);
    if (problems.has(node.id)) classes.push("invalid");
    if (selected === node.id) classes.push("selected");
    return classes.join(" ");
  }

  function statusLine(node) {
    if (problems.has(node.id)) return `⚠ ${problems.get(node.id)[0]}`;
    const state = states.get(node.name);
    return state ? state.text : node.type;
  }

  function drawNode(node) {
    const { x, y } = node.position;
    const group = svg("g", {
      transform: `translate(${x},${y})`, tabindex: "0", role: "button", "data-node-id": node.id,
      "data-node-name": node.name,
    },
    svg("title", {}),
    svg("rect", { class: "wf-node-box", width: NODE_W, height: NODE_H, rx: "8" }),
    svg("rect", { class: "wf-node-kind", x: "1", y: "8", width: "5", height: NODE_H - 16, rx: "2" }),
    svg("text", { class: "wf-node-name", x: "12", y: "22" }, clip(node.name, 20)),
    svg("text", { class: "wf-node-status", x: "12", y: "44" }),
    svg("circle", { class: "wf-port in", cx: "0", cy: NODE_H / 2, r: "6" }),
    svg("circle", { class: "wf-port out", cx: NODE_W, cy: NODE_H / 2, r: "7", "data-port": "out" },
      svg("title", {}, "Drag to another node to connect")));
    decorate(group, node);
    group.addEventListener("pointerdown", (event) => startPointer(event, node));
    group.addEventListener("keydown", (event) => nodeKey(event, node));
    group.addEventListener("keyup", (event) => {
      if (event.key.startsWith("Arrow")) callbacks.onMove(node.id, { ...node.position }, true);
    });
    group.addEventListener("focus", () => select(node.id, false));
    return group;
  }

  // What changes while a run goes on or a save is refused: the classes, the status line and the names.
  function decorate(group, node) {
    const invalid = problems.get(node.id);
    const stateText = states.get(node.name)?.text;
    group.setAttribute("class", nodeClasses(node));
    group.setAttribute("aria-label", `${node.name}, ${node.type} node${stateText ? `, ${stateText}` : ""}`
      + `${invalid ? `, invalid: ${invalid.join(" ")}` : ""}`);
    group.querySelector("title").textContent = invalid ? `${node.name}: ${invalid.join(" ")}`
      : `${node.name} (${node.type})${stateText ? `: ${stateText}` : ""}`;
    group.querySelector(".wf-node-status").textContent = clip(statusLine(node), 26);
  }

  function nodeKey(event, node) {
    const moves = { ArrowLeft: [-1, 0], ArrowRight: [1, 0], ArrowUp: [0, -1], ArrowDown: [0, 1] };
    if (moves[event.key]) {
      event.preventDefault();
      const step = event.shiftKey ? BIG_STEP : STEP;
      const [dx, dy] = moves[event.key];
      moveNode(node, { x: node.position.x + dx * step, y: node.position.y + dy * step });
      callbacks.onMove(node.id, { ...node.position }, false);
    } else if (event.key === "Enter" || event.key === " ") {
      event.preventDefault();
      callbacks.onOpen(node.id);
    }
  }

  function moveNode(node, position) {
    node.position = { x: Math.round(position.x), y: Math.round(position.y) };
    const group = nodeLayer.querySelector(`[data-node-id="${CSS.escape(node.id)}"]`);
    group?.setAttribute("transform", `translate(${node.position.x},${node.position.y})`);
    drawEdges();
  }

  function startPointer(event, node) {
    if (event.button !== 0) return;
    const fromPort = event.target.closest?.("[data-port=out]");
    const start = toGraph(event);
    const origin = { ...node.position };
    const group = event.currentTarget;
    group.setPointerCapture(event.pointerId);
    let dragged = false;
    const move = (moveEvent) => {
      const point = toGraph(moveEvent);
      if (fromPort) {
        const x1 = node.position.x + NODE_W;
        const y1 = node.position.y + NODE_H / 2;
        rubber.setAttribute("d", `M${x1},${y1} L${point.x},${point.y}`);
        return;
      }
      const dx = point.x - start.x;
      const dy = point.y - start.y;
      if (!dragged && Math.hypot(dx, dy) < 4) return;
      dragged = true;
      dragging = true;
      group.classList.add("dragging");
      moveNode(node, { x: origin.x + dx, y: origin.y + dy });
    };
    const up = (upEvent) => {
      group.removeEventListener("pointermove", move);
      group.removeEventListener("pointerup", up);
      group.removeEventListener("pointercancel", up);
      group.classList.remove("dragging");
      dragging = false;
      if (fromPort) {
        rubber.setAttribute("d", "");
        const target = document.elementFromPoint(upEvent.clientX, upEvent.clientY)?.closest?.(".wf-node");
        const targetId = target?.getAttribute("data-node-id");
        if (targetId && targetId !== node.id) callbacks.onConnect(node.id, targetId);
        return;
      }
      if (dragged) callbacks.onMove(node.id, { ...node.position }, true);
      else {
        select(node.id, true);
        callbacks.onOpen(node.id);
      }
    };
    group.addEventListener("pointermove", move);
    group.addEventListener("pointerup", up);
    group.addEventListener("pointercancel", up);
    event.preventDefault();
  }

  function select(id, focus) {
    if (selected === id) return;
    selected = id;
    for (const group of nodeLayer.children) {
      group.classList.toggle("selected", group.getAttribute("data-node-id") === id);
    }
    if (focus && id) nodeElement(id)?.focus();
    callbacks.onSelect?.(id);
  }

  function nodeElement(id) {
    return nodeLayer.querySelector(`[data-node-id="${CSS.escape(id)}"]`);
  }

  function render(next) {
    if (dragging) return;
    const focusedId = document.activeElement?.getAttribute?.("data-node-id");
    // The graph keeps its own copies: a drag moves them in place without touching the editor's document.
    doc = { nodes: next.nodes.map((node) => ({ ...node, position: { ...(node.position || { x: 0, y: 0 }) } })),
      edges: next.edges.map((edge) => ({ ...edge })) };
    if (selected && !doc.nodes.some((node) => node.id === selected)) selected = null;
    nodeLayer.replaceChildren(...doc.nodes.map(drawNode));
    drawEdges();
    fit();
    if (focusedId) nodeElement(focusedId)?.focus({ preventScroll: true });
  }

  return {
    render,
    select,
    focusNode(id) {
      const element = nodeElement(id);
      element?.focus();
      element?.scrollIntoView?.({ block: "nearest", inline: "nearest" });
    },
    // A run's node states: name -> {state: "running"|"done"|"error", text}.
    setStates(next) {
      states = new Map(next);
      for (const node of doc.nodes) {
        const group = nodeElement(node.id);
        if (group) decorate(group, node);
      }
    },
    // The problems a refused save named (node id -> messages, "from->to" -> messages); drawn by the next
    // render.
    setProblems(nodeMap, edgeMap) {
      problems = new Map(nodeMap);
      edgeProblems = new Map(edgeMap);
    },
    // The zoom at which the whole graph fits `width` pixels (never above 100%).
    fit(width) {
      scale = Math.min(1, Math.max(0.3, (width - 4) / bounds().width));
      fit();
      return scale;
    },
    zoom(factor) {
      scale = factor === null ? 1 : Math.min(2.5, Math.max(0.3, scale * factor));
      fit();
      return scale;
    },
    get scale() {
      return scale;
    },
  };
}
