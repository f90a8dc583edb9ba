"""The dashboard's Knowledge page in a real Chromium: documents added by pasting and by upload, searched with
their scores shown, deleted; the chat folding the sources a reply used; phone and desktop widths."""

from __future__ import annotations

import re

import pytest
import requests
from playwright.sync_api import expect

from tests.dashboard.conftest import DESKTOP, PHONE

pytestmark = pytest.mark.e2e

TIDES = ("Tides are caused by the gravitational pull of the moon and the sun on the oceans. "
         "Spring tides happen at new and full moon, when the pull lines up.")
VOLCANO = "Volcanoes erupt when magma rises through cracks in the crust and pressure is released."


def documents(page):
    return page.get_by_role("table")


def paste(page, name: str, text: str) -> None:
    page.get_by_label("Document name").fill(name)
    page.get_by_label("Text", exact=True).fill(text)
    page.get_by_role("button", name="Add text").click()
    expect(documents(page).get_by_role("rowheader", name=name)).to_be_visible()


def test_documents_are_added_searched_with_scores_and_deleted(dashboard_server, user_page, normal_user, shot,
                                                              tmp_path):
    page = user_page
    page.get_by_role("link", name="Knowledge").click()
    expect(page.get_by_text("No documents yet")).to_be_visible()

    paste(page, "tides.md", TIDES)
    upload = tmp_path / "volcanoes.txt"
    upload.write_text(VOLCANO)
    page.get_by_label("File", exact=True).set_input_files(str(upload))
    page.get_by_role("button", name="Upload").click()
    row = documents(page).get_by_role("row", name=re.compile("volcanoes.txt"))
    expect(row).to_be_visible()
    expect(row.get_by_role("cell").first).to_have_text("1")  # its chunks

    page.get_by_label("Search query").fill("why does the moon cause tides")
    page.get_by_role("button", name="Search", exact=True).click()
    hits = page.locator(".kb-hit")
    expect(hits.first).to_contain_text("tides.md")
    expect(hits.first).to_contain_text("gravitational pull of the moon")
    expect(page.get_by_label("Mode")).to_have_value("hybrid")  # the default
    scores = [float(text.split()[-1]) for text in page.locator(".kb-score").all_inner_texts()]
    ranks = [float(text.split()[-1]) for text in page.locator(".kb-rank").all_inner_texts()]
    assert scores and all(-1 <= score <= 1 for score in scores) and len(ranks) == len(scores)
    assert ranks == sorted(ranks, reverse=True) and 0 < ranks[0] <= 1.2  # the order follows the rank score
    # The scores shown are the API's own, for the same query and mode.
    answer = requests.post(f"{dashboard_server.base_url}/api/kb/search", timeout=10,
                           headers={"Authorization": f"Bearer {normal_user['token']}"},
                           json={"query": "why does the moon cause tides", "topK": 5}).json()
    assert [f"{hit['score']:.3f}" for hit in answer["results"]] == [f"{score:.3f}" for score in scores]
    assert [f"{hit['rank_score']:.3f}" for hit in answer["results"]] == [f"{rank:.3f}" for rank in ranks]
    shot(page, "knowledge-1280")

    # The vector mode: the seed's rule, ranked by similarity alone (rank score = similarity).
    page.get_by_label("Mode").select_option("vector")
    page.get_by_role("button", name="Search", exact=True).click()
    vector = requests.post(f"{dashboard_server.base_url}/api/kb/search", timeout=10,
                           headers={"Authorization": f"Bearer {normal_user['token']}"},
                           json={"query": "why does the moon cause tides", "topK": 5, "mode": "vector"}).json()
    expected = [f"rank {hit['score']:.3f}" for hit in vector["results"]]
    expect(page.locator(".kb-rank")).to_have_text(expected)
    expect(page.locator(".kb-score")).to_have_text([f"similarity {hit['score']:.3f}" for hit in vector["results"]])

    page.get_by_role("button", name="Delete volcanoes.txt").click()
    page.get_by_role("dialog").get_by_role("button", name="Delete").click()
    expect(documents(page).get_by_role("rowheader", name="volcanoes.txt")).to_have_count(0)
    expect(documents(page).get_by_role("rowheader", name="tides.md")).to_be_visible()
    listed = requests.get(f"{dashboard_server.base_url}/api/kb/documents", timeout=10,
                          headers={"Authorization": f"Bearer {normal_user['token']}"}).json()["results"]
    assert [document["filename"] for document in listed] == ["tides.md"]


def test_a_refused_document_and_an_empty_search_show_their_errors(user_page, tmp_path):
    page = user_page
    page.goto("/#/knowledge")
    binary = tmp_path / "picture.png"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4)
    page.get_by_label("File", exact=True).set_input_files(str(binary))
    page.get_by_role("button", name="Upload").click()
    expect(page.get_by_role("alert").filter(has_text="picture.png was not added")).to_be_visible()

    page.get_by_role("button", name="Add text").click()
    expect(page.get_by_role("alert").filter(has_text="Give the document a name")).to_be_visible()
    expect(page.get_by_label("Document name")).to_be_focused()


@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["375", "1280"])
def test_knowledge_fits_phone_and_desktop_screens(dashboard_server, admin_headers, logged_in_page, shot, viewport):
    page = logged_in_page
    requests.post(f"{dashboard_server.base_url}/api/kb/documents", headers=admin_headers, timeout=10,
                  json={"filename": f"a-rather-long-document-name-{viewport['width']}.md", "content": TIDES})
    page.set_viewport_size(viewport)
    page.goto("/#/knowledge")
    page.get_by_label("Search query").fill("moon")
    page.get_by_label("Search query").press("Enter")
    expect(page.locator(".kb-hit").first).to_be_visible()
    overflow = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the page is {overflow} px wider than a {viewport['width']} px screen"
    shot(page, f"knowledge-{viewport['width']}")
