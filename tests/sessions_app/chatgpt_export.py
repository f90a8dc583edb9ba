"""A small ChatGPT `conversations.json` in the shape of the real export: two conversations, the first with an
edited question (two branches) and the nodes an import skips (the null root, a hidden system message, custom
instructions, a call to a tool and its output), the second with an image beside the text."""

from __future__ import annotations

from typing import Any

T0 = 1_717_000_000.0


def node(key: str, parent: str | None, children: list[str], role: str | None = None, text: str | None = None, *,
         at: float = 0.0, content_type: str = "text", parts: list[Any] | None = None, recipient: str = "all",
         hidden: bool = False, model: str = "") -> dict[str, Any]:
    """One mapping entry; `role` None: the root's null message."""
    if role is None:
        return {"id": key, "message": None, "parent": parent, "children": children}
    metadata: dict[str, Any] = {"is_visually_hidden_from_conversation": True} if hidden else {}
    if model:
        metadata["model_slug"] = model
    return {"id": key, "parent": parent, "children": children, "message": {
        "id": key, "author": {"role": role, "name": None, "metadata": {}}, "create_time": T0 + at,
        "update_time": None, "content": {"content_type": content_type, "parts": parts if parts is not None else [text]},
        "status": "finished_successfully", "end_turn": True, "weight": 1.0, "metadata": metadata,
        "recipient": recipient}}


def conversations() -> list[dict[str, Any]]:
    """The export: `Trip to Lyon` (edited: current is the second branch) and `A photo`."""
    trip = [
        node("root", None, ["sys"]),
        node("sys", "root", ["ctx"], "system", "", at=1, hidden=True),
        node("ctx", "sys", ["q1", "q1b"], "user", "I like trains.", at=2, content_type="user_editable_context",
             parts=None, hidden=True),
        node("q1", "ctx", ["a1"], "user", "How far is Lyon from Paris?", at=3),
        node("a1", "q1", [], "assistant", "About 465 km.", at=4, model="gpt-4o"),
        node("q1b", "ctx", ["call"], "user", "How long is the train from Paris to Lyon?", at=10),
        node("call", "q1b", ["out"], "assistant", "search('TGV Paris Lyon')", at=11, content_type="code",
             recipient="browser", model="gpt-4o"),
        node("out", "call", ["a1b"], "tool", "TGV: 1 h 57", at=12, content_type="execution_output"),
        node("a1b", "out", ["a1c"], "assistant", "About two hours by TGV.", at=13, model="gpt-4o"),
        node("a1c", "a1b", [], "assistant", "Book early for the best fares.", at=14, model="gpt-4o"),
    ]
    photo = [
        node("r", None, ["p1"]),
        node("p1", "r", ["p2"], "user", None, at=100, content_type="multimodal_text", parts=[
            {"content_type": "image_asset_pointer", "asset_pointer": "file-service://file-abc", "width": 10,
             "height": 10}, "What is in this photo?"]),
        node("p2", "p1", [], "assistant", "A cat on a sofa.", at=101, model="gpt-4o-mini"),
    ]
    return [
        {"title": "Trip to Lyon", "create_time": T0, "update_time": T0 + 14, "mapping": {n["id"]: n for n in trip},
         "current_node": "a1c", "conversation_id": "c-1", "id": "c-1", "moderation_results": []},
        {"title": "A photo", "create_time": T0 + 100, "update_time": T0 + 101,
         "mapping": {n["id"]: n for n in photo}, "current_node": "p2", "conversation_id": "c-2", "id": "c-2"},
    ]
