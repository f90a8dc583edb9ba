// The editor's working document, {name, description, nodes, edges} as a PATCH carries it, and the edits
// made to it. Plain data in, plain data out: no DOM and no server here (the editor draws and saves).
//
// A condition's way out is one of its branches (config.trueBranch/falseBranch name the next node) and is an
// edge too: connecting from a condition fills its first free branch, and removing that edge, or the node it
// leads to, empties the branch.

export const DOC_KEYS = ["name", "description", "nodes", "edges"];
const BRANCHES = ["trueBranch", "falseBranch"];

export function clone(value) {
  return JSON.parse(JSON.stringify(value));
}

// The editable part of a workflow as the server returns it.
export function documentOf(workflow) {
  return { name: workflow.name, description: workflow.description || "", nodes: clone(workflow.nodes), edges: clone(workflow.edges) };
}

// A document the graph can draw: nodes with string ids, names and types, edges of two strings.
export function drawable(doc) {
  return doc && typeof doc === "object" && Array.isArray(doc.nodes) && Array.isArray(doc.edges)
    && doc.nodes.every((node) => node && typeof node === "object" && typeof node.id === "string"
      && typeof node.type === "string" && typeof node.name === "string"
      && (node.config === undefined || (node.config && typeof node.config === "object" && !Array.isArray(node.config)))
      && (node.position === undefined || (node.position && Number.isFinite(node.position.x) && Number.isFinite(node.position.y))))
    && doc.edges.every((edge) => edge && typeof edge.from === "string" && typeof edge.to === "string");
}

// A node's output (or a run's) as text: strings as they are, anything else as indented JSON.
export function showValue(value) {
  if (value === undefined) return "";
  return typeof value === "string" ? value : JSON.stringify(value, null, 2);
}

export function nameOf(doc, id) {
  return doc.nodes.find((node) => node.id === id)?.name ?? id;
}

export function isConnected(doc, from, to) {
  return doc.edges.some((edge) => edge.from === from && edge.to === to);
}

// Add the edge from -> to; returns the branch ("trueBranch"/"falseBranch") it became, or null.
export function connectNodes(doc, from, to) {
  const source = doc.nodes.find((node) => node.id === from);
  const branch = source?.type === "condition"
    ? BRANCHES.find((key) => !source.config?.[key] || source.config[key] === to) ?? null : null;
  doc.edges.push({ from, to });
  if (branch) source.config = { ...source.config, [branch]: to };
  return branch;
}

export function disconnectNodes(doc, from, to) {
  doc.edges = doc.edges.filter((edge) => !(edge.from === from && edge.to === to));
  const source = doc.nodes.find((node) => node.id === from && node.type === "condition");
  for (const key of BRANCHES) if (source?.config?.[key] === to) delete source.config[key];
}

// Remove a node, its edges, and the branches that led to it.
export function removeNode(doc, id) {
  doc.nodes = doc.nodes.filter((node) => node.id !== id);
  doc.edges = doc.edges.filter((edge) => edge.from !== id && edge.to !== id);
  for (const node of doc.nodes) {
    for (const key of BRANCHES) if (node.config?.[key] === id) delete node.config[key];
  }
}
