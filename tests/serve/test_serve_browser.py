"""The page of `corefsearch serve` in a real browser: Debian's chromium, headless, driven by
selenium through chromium-driver, against a real uvicorn server (in a thread, on a free port)
over the ECB+ subset with a tiny random reader and the subset dataset.

The mention is selected with the mouse (a double-click on it in the passage), the search is run
from the page, and the hit list, the matched terms and the reader's spans on the page are checked
against the API's answer; then a hit opens in its document, and a dataset query opened by id shows
its relevant hits and gold mentions. A screenshot of the page goes to the test's temporary folder
(and, with COREFSEARCH_SCREENSHOT=PATH, also to PATH). The query picker counts what it lists and
finds the rest; and on a second server, without a reader and with a passage nobody annotated, the
legend leaves out the reader's span, that passage is marked unjudged, the results go page by page
up to the server's max_k, and the page's address reopens the search it shows. On plain documents
nobody annotated, the cluster view and the second round say where their mentions came from
(detected at query time), and with the annotated mentions asked for (none there) the note says the
cluster is the query mention alone.

chromium and chromedriver must be installed (`apt-get install chromium chromium-driver`; `.ci/run`
installs them): without them the test fails, saying so. COREFSEARCH_SKIP_BROWSER=1 skips it
instead, for a machine without a browser (never set in CI)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import (
    REPRINT_PASSAGE,
    ServerThread,
    plain_news_collection,
    query_with_a_relevant_hit,
    save_mention_encoder,
    saved_reader,
    subset_query,
    subset_with_a_reprint,
    tiny_bert,
)

from corefsearch.base.schema import Query
from corefsearch.reader.rerank import ReaderOptions
from corefsearch.search.engine import SearchEngine
from corefsearch.search.options import ExpansionOptions, RetrievalOptions, SearchOptions
from corefsearch.serve.app import Limits, create_app
from corefsearch.sparse.search import BM25Options

pytestmark = pytest.mark.java
RERANK_K = 5
WAIT = 60  # seconds: a search on a busy 2-core machine, with the reader

# Where each mark class covers the text of each hit (or of the elements matching `selector`), as
# [start, end) ranges of characters, adjacent pieces merged: what the page highlighted.
MARKED_RANGES = """
const [selector, classes] = arguments;
return [...document.querySelectorAll(selector)].map((block) => {
  const found = Object.fromEntries(classes.map((name) => [name, []]));
  let offset = 0;
  for (const node of block.childNodes) {
    const length = node.textContent.length;
    for (const name of classes) {
      if (node.nodeType === 1 && node.classList.contains(name)) {
        const ranges = found[name];
        const last = ranges[ranges.length - 1];
        if (last && last[1] === offset) last[1] = offset + length;
        else ranges.push([offset, offset + length]);
      }
    }
    offset += length;
  }
  return {id: block.dataset.passageId, text: block.textContent, marks: found};
});
"""

# The centre of characters [start, end) of a textarea, relative to the textarea's centre (a
# mirror element laid out like the textarea tells where the characters are drawn).
CHARACTERS_AT = """
const [area, start, end] = arguments;
const style = getComputedStyle(area);
const mirror = document.createElement("div");
for (const name of ["boxSizing", "width", "paddingTop", "paddingRight", "paddingBottom", "paddingLeft",
                    "borderTopWidth", "borderRightWidth", "borderBottomWidth", "borderLeftWidth", "borderStyle",
                    "fontFamily", "fontSize", "fontWeight", "fontStyle", "letterSpacing", "lineHeight",
                    "textTransform", "wordSpacing", "textIndent", "tabSize"]) {
  mirror.style[name] = style[name];
}
Object.assign(mirror.style, {position: "absolute", visibility: "hidden", whiteSpace: "pre-wrap",
                             overflowWrap: "break-word", top: "0px", left: "0px"});
const mark = document.createElement("span");
mark.textContent = area.value.slice(start, end);
mirror.append(area.value.slice(0, start), mark, area.value.slice(end));
document.body.appendChild(mirror);
const box = mark.getBoundingClientRect(), origin = mirror.getBoundingClientRect();
const area_box = area.getBoundingClientRect();
mirror.remove();
return {x: box.left - origin.left + box.width / 2 - area.scrollLeft - area_box.width / 2,
        y: box.top - origin.top + box.height / 2 - area.scrollTop - area_box.height / 2};
"""


def merged(ranges: list[list[int]]) -> list[list[int]]:
    out: list[list[int]] = []
    for start, end in sorted(ranges):
        if out and out[-1][1] >= start:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return out


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver_path is None:
        missing = " and ".join(name for name, path in (("chromium", chromium), ("chromedriver", driver_path))
                               if path is None)
        if os.environ.get("COREFSEARCH_SKIP_BROWSER") == "1":
            pytest.skip(f"{missing} not installed and COREFSEARCH_SKIP_BROWSER=1")
        pytest.fail(f"the browser test needs {missing}: `apt-get install chromium chromium-driver` (.ci/run "
                    "installs them), or set COREFSEARCH_SKIP_BROWSER=1 to skip it on this machine")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--window-size=1400,1200", "--lang=en-US"):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
    driver.set_page_load_timeout(WAIT)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def engine(subset_index: Path, subset_dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> SearchEngine:
    root = tmp_path_factory.mktemp("browser-models")
    reader = saved_reader(tiny_bert(subset_dataset, root / "bert"), root / "reader")
    return SearchEngine.open(subset_index, SearchOptions(
        bm25=BM25Options(query_format="mention+entities"), retrieval=RetrievalOptions("bm25", device="cpu"),
        reader=ReaderOptions(reader, RERANK_K, device="cpu")), subset_dataset)


@pytest.fixture(scope="module")
def server(engine: SearchEngine) -> Iterator[str]:
    running = ServerThread(create_app(engine, threads=2)).start()
    yield running.url
    running.stop()


@pytest.fixture(scope="module")
def reprint(ecbplus_subset: Path, subset_dataset: Path, tmp_path_factory: pytest.TempPathFactory
            ) -> tuple[Path, Path, Query]:
    return subset_with_a_reprint(ecbplus_subset, subset_dataset, tmp_path_factory.mktemp("reprint"))


PLAIN_MAX_K = 12


@pytest.fixture(scope="module")
def plain_server(reprint: tuple[Path, Path, Query]) -> Iterator[str]:
    """A server without a reader, over the subset with an unannotated reprint, ranking 12 deep at most."""
    dataset, index, _ = reprint
    engine = SearchEngine.open(index, SearchOptions(bm25=BM25Options(query_format="mention"),
                                                   retrieval=RetrievalOptions("bm25", device="cpu")), dataset)
    running = ServerThread(create_app(engine, limits=Limits(max_k=PLAIN_MAX_K), threads=2)).start()
    yield running.url
    running.stop()


def marked(driver: Any, selector: str) -> list[dict[str, Any]]:
    return driver.execute_script(MARKED_RANGES, selector, ["term", "span", "gold"])


def wait_for_text(driver: Any, element_id: str, text: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, WAIT).until(lambda d: text in d.find_element(By.ID, element_id).text,
                                      f"#{element_id} never showed {text!r}")


def test_select_a_mention_with_the_mouse_search_and_read_the_hits(browser: Any, server: str, engine: SearchEngine,
                                                                   subset_dataset: Path, tmp_path: Path) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(server)
    wait_for_text(browser, "server-info", "retrievers bm25")
    assert "reader" in browser.find_element(By.ID, "server-info").text
    assert browser.find_element(By.ID, "dataset-row").is_displayed()
    assert browser.find_element(By.ID, "legend-span").is_displayed()  # the server has a reader
    assert browser.find_element(By.ID, "legend-gold").is_displayed()  # ... and a dataset

    # Paste a passage, then double-click its mention: the page takes the selection as the mention.
    query = subset_query(subset_dataset)
    area = browser.find_element(By.ID, "context")
    area.send_keys(query.text)
    assert area.get_attribute("value") == query.text
    where = browser.execute_script(CHARACTERS_AT, area, query.start, query.end)
    ActionChains(browser).move_to_element_with_offset(area, round(where["x"]), round(where["y"])).double_click(
    ).perform()
    assert browser.find_element(By.ID, "mention").get_attribute("value") == query.mention
    assert browser.find_element(By.ID, "mention-where").text == f"characters {query.start}–{query.end} (selected)"
    assert [mark.text for mark in browser.find_elements(By.CSS_SELECTOR, "#context-preview .mention")] == [
        query.mention]

    k = browser.find_element(By.ID, "k")
    k.clear()
    k.send_keys("8")
    browser.find_element(By.ID, "search").click()
    wait_for_text(browser, "summary", "8 hits")

    # The hits on the page are the API's answer to the same question, with its highlights.
    expected = httpx.post(f"{server}search", json={"context": query.text, "start": query.start, "end": query.end,
                                                  "k": 8}, timeout=WAIT).json()
    shown = marked(browser, "#hits li.hit .hit-text")
    items = browser.find_elements(By.CSS_SELECTOR, "#hits li.hit")
    assert [item.get_attribute("data-passage-id") for item in items] == [h["passage_id"] for h in expected["hits"]]
    assert [block["text"] for block in shown] == [hit["text"] for hit in expected["hits"]]
    for block, hit in zip(shown, expected["hits"], strict=True):
        assert block["marks"]["term"] == merged(hit["matched"])
        assert block["marks"]["span"] == ([[hit["span"]["start"], hit["span"]["end"]]] if "span" in hit else [])
    assert sum(1 for hit in expected["hits"] if "span" in hit) == RERANK_K
    assert any(block["marks"]["term"] for block in shown)
    pieces = items[0].find_elements(By.CSS_SELECTOR, ".hit-text .span")  # cut where matched terms overlap it
    assert "".join(piece.get_attribute("textContent") for piece in pieces) == expected["hits"][0]["span"]["text"]
    assert pieces[0].value_of_css_property("background-color") == "rgba(255, 217, 94, 1)"  # the span's yellow

    # A hit opens in its document, the hit's passage marked there.
    hit = expected["hits"][1]
    items[1].find_element(By.CSS_SELECTOR, "button.open-document").click()
    WebDriverWait(browser, WAIT).until(lambda d: d.find_element(By.ID, "document").is_displayed())
    document = httpx.get(f"{server}passages/{hit['passage_id']}", timeout=WAIT).json()["document"]
    blocks = browser.find_elements(By.CSS_SELECTOR, "#document-passages .doc-passage")
    assert [block.get_attribute("data-passage-id") for block in blocks] == [part["id"] for part in document]
    current = browser.find_element(By.CSS_SELECTOR, "#document-passages .doc-passage.current")
    assert current.get_attribute("data-passage-id") == hit["passage_id"] and current.text == hit["text"]

    # A dataset query by id: its passage and mention fill the question, relevant hits and gold mentions are marked.
    found = query_with_a_relevant_hit(engine, subset_dataset, RERANK_K)
    browser.find_element(By.ID, "qid").send_keys(found.id)
    browser.find_element(By.ID, "open-query").click()
    wait_for_text(browser, "summary", f"(query {found.id})")
    assert browser.find_element(By.ID, "context").get_attribute("value") == found.text
    assert browser.find_element(By.ID, "mention").get_attribute("value") == found.mention
    answer = httpx.post(f"{server}search", json={"qid": found.id, "k": 8}, timeout=WAIT).json()
    items = browser.find_elements(By.CSS_SELECTOR, "#hits li.hit")
    assert [("relevant" in item.get_attribute("class").split()) for item in items] == [
        h["relevant"] for h in answer["hits"]]
    # Every ECB+ document is annotated: a hit that is not relevant was judged so.
    assert [item.find_element(By.CSS_SELECTOR, ".badge").text for item in items] == [
        "relevant" if h["relevant"] else "not relevant" for h in answer["hits"]]
    shown = marked(browser, "#hits li.hit .hit-text")
    for block, hit in zip(shown, answer["hits"], strict=True):
        assert block["marks"]["gold"] == merged([[g["start"], g["end"]] for g in hit["gold_mentions"]])
    assert any(block["marks"]["gold"] for block in shown)

    # A question the server refuses shows its message on the page.
    mention = browser.find_element(By.ID, "mention")
    mention.clear()
    mention.send_keys("no such words here")
    browser.find_element(By.ID, "search").click()
    wait_for_text(browser, "error", "does not occur in the context")

    browser.find_element(By.ID, "mention").clear()
    browser.execute_script("window.scrollTo(0, 0)")
    # Back to the dataset query's answer for the picture.
    browser.find_element(By.ID, "open-query").click()
    wait_for_text(browser, "summary", f"(query {found.id})")
    screenshot = tmp_path / "page.png"
    assert browser.save_screenshot(str(screenshot))
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and screenshot.stat().st_size > 20_000
    if os.environ.get("COREFSEARCH_SCREENSHOT"):
        shutil.copyfile(screenshot, os.environ["COREFSEARCH_SCREENSHOT"])


def hits_shown(driver: Any) -> list[str]:
    from selenium.webdriver.common.by import By

    return [item.get_attribute("data-passage-id") for item in driver.find_elements(By.CSS_SELECTOR, "#hits li.hit")]


def api_hits(server: str, **body: Any) -> list[dict[str, Any]]:
    response = httpx.post(f"{server}search", json=body, timeout=WAIT)
    assert response.status_code == 200, response.text
    return list(response.json()["hits"])


def test_the_query_picker_counts_what_it_lists_and_finds_the_rest(browser: Any, server: str,
                                                                  subset_dataset: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    queries = httpx.get(f"{server}queries", params={"split": "test", "limit": 1000}, timeout=WAIT).json()
    total = queries["total"]
    assert total > 200  # more than the picker lists at a time
    browser.get(server)
    wait_for_text(browser, "query-count", f"1–200 of {total} queries")
    picker = Select(browser.find_element(By.ID, "dataset-query"))
    listed = [option.get_attribute("value") for option in picker.options][1:]
    assert listed == [q["id"] for q in queries["queries"][:200]]
    assert not browser.find_element(By.ID, "queries-next").get_attribute("disabled")
    browser.find_element(By.ID, "queries-next").click()
    wait_for_text(browser, "query-count", f"201–{total} of {total} queries")
    listed = [option.get_attribute("value") for option in picker.options][1:]
    assert listed == [q["id"] for q in queries["queries"][200:]]
    assert browser.find_element(By.ID, "queries-next").get_attribute("disabled")

    # A part of a mention finds every query it is part of (in any case), whichever page it was on.
    last = queries["queries"][-1]
    word = last["mention"]
    matching = [q["id"] for q in queries["queries"] if word.casefold() in q["mention"].casefold()
                or word.casefold() in q["id"].casefold()]
    browser.find_element(By.ID, "query-filter").send_keys(word.upper())
    wait_for_text(browser, "query-count", f"of the {len(matching)} quer")
    assert f"matching “{word.upper()}” ({total} in test)" in browser.find_element(By.ID, "query-count").text
    listed = [option.get_attribute("value") for option in picker.options][1:]
    assert listed == matching and last["id"] in listed
    picker.select_by_value(last["id"])
    wait_for_text(browser, "summary", f"(query {last['id']})")
    WebDriverWait(browser, WAIT).until(lambda d: d.find_element(By.ID, "qid").get_attribute("value") == last["id"])


def test_without_a_reader_the_legend_has_no_span_and_an_unannotated_passage_is_unjudged(
        browser: Any, plain_server: str, reprint: tuple[Path, Path, Query]) -> None:
    from selenium.webdriver.common.by import By

    query = reprint[2]
    browser.get(plain_server)
    wait_for_text(browser, "server-info", "retrievers bm25")
    assert "reader" not in browser.find_element(By.ID, "server-info").text
    assert not browser.find_element(By.ID, "legend-span").is_displayed()
    assert browser.find_element(By.ID, "legend-gold").is_displayed()
    assert not browser.find_element(By.ID, "rerank-box").is_displayed()

    k = browser.find_element(By.ID, "k")
    k.clear()
    k.send_keys(str(PLAIN_MAX_K))
    browser.find_element(By.ID, "qid").send_keys(query.id)
    browser.find_element(By.ID, "open-query").click()
    wait_for_text(browser, "summary", f"(query {query.id})")
    expected = api_hits(plain_server, qid=query.id, k=PLAIN_MAX_K)
    assert hits_shown(browser) == [hit["passage_id"] for hit in expected]
    items = browser.find_elements(By.CSS_SELECTOR, "#hits li.hit")
    badges = {item.get_attribute("data-passage-id"): item.find_element(By.CSS_SELECTOR, ".badge").text
              for item in items}
    assert badges[REPRINT_PASSAGE] == "unjudged"
    reprinted = next(item for item in items if item.get_attribute("data-passage-id") == REPRINT_PASSAGE)
    assert "unjudged" in reprinted.get_attribute("class").split()
    assert "did not annotate" in reprinted.find_element(By.CSS_SELECTOR, ".badge").get_attribute("title")
    words = {"relevant": "relevant", "not_relevant": "not relevant", "unjudged": "unjudged"}
    assert badges == {hit["passage_id"]: words[hit["judgement"]] for hit in expected}
    assert set(badges.values()) == {"relevant", "not relevant", "unjudged"}


def test_results_go_page_by_page_up_to_the_servers_max_k(browser: Any, plain_server: str,
                                                         reprint: tuple[Path, Path, Query]) -> None:
    from selenium.webdriver.common.by import By

    query = reprint[2]
    ranking = api_hits(plain_server, qid=query.id, k=PLAIN_MAX_K)
    assert len(ranking) == PLAIN_MAX_K
    browser.get(plain_server)
    wait_for_text(browser, "server-info", "retrievers bm25")
    k = browser.find_element(By.ID, "k")
    k.clear()
    k.send_keys("5")
    browser.find_element(By.ID, "qid").send_keys(query.id)
    browser.find_element(By.ID, "open-query").click()
    wait_for_text(browser, "summary", "5 hits (ranks 1–5)")
    previous, following = browser.find_element(By.ID, "previous-page"), browser.find_element(By.ID, "next-page")
    assert previous.get_attribute("disabled") and not following.get_attribute("disabled")
    assert f"this server ranks at most {PLAIN_MAX_K} passages" in browser.find_element(By.ID, "page-info").text
    assert hits_shown(browser) == [hit["passage_id"] for hit in ranking[:5]]

    following.click()
    wait_for_text(browser, "summary", "5 hits (ranks 6–10)")
    assert hits_shown(browser) == [hit["passage_id"] for hit in ranking[5:10]]
    assert [rank.text for rank in browser.find_elements(By.CSS_SELECTOR, "#hits .rank")] == [
        f"{rank}." for rank in range(6, 11)]
    following.click()  # the last page stops at rank 12, the server's max_k
    wait_for_text(browser, "summary", "2 hits (ranks 11–12)")
    assert hits_shown(browser) == [hit["passage_id"] for hit in ranking[10:]]
    assert following.get_attribute("disabled") and not previous.get_attribute("disabled")
    assert browser.find_element(By.ID, "page-info").text.startswith("ranks 11–12")
    previous.click()
    wait_for_text(browser, "summary", "5 hits (ranks 6–10)")
    assert hits_shown(browser) == [hit["passage_id"] for hit in ranking[5:10]]


def test_the_pages_address_reopens_the_search_it_shows(browser: Any, plain_server: str,
                                                       reprint: tuple[Path, Path, Query]) -> None:
    from urllib.parse import parse_qs, urlsplit

    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    query = reprint[2]
    browser.get(plain_server)
    wait_for_text(browser, "server-info", "retrievers bm25")
    k = browser.find_element(By.ID, "k")
    k.clear()
    k.send_keys("4")
    browser.find_element(By.ID, "qid").send_keys(query.id)
    browser.find_element(By.ID, "open-query").click()
    wait_for_text(browser, "summary", "4 hits (ranks 1–4)")
    browser.find_element(By.ID, "next-page").click()
    wait_for_text(browser, "summary", "4 hits (ranks 5–8)")
    shown = hits_shown(browser)
    address = browser.current_url
    assert parse_qs(urlsplit(address).fragment) == {"qid": [query.id], "k": ["4"], "retriever": ["bm25"],
                                                    "query_format": ["mention"], "offset": ["4"]}

    # The address alone, in a fresh page: the same question, options and page.
    browser.get("about:blank")
    browser.get(address)
    wait_for_text(browser, "summary", "4 hits (ranks 5–8)")
    assert hits_shown(browser) == shown == [hit["passage_id"] for hit in api_hits(
        plain_server, qid=query.id, k=4, offset=4)]
    assert browser.find_element(By.ID, "qid").get_attribute("value") == query.id
    assert browser.find_element(By.ID, "k").get_attribute("value") == "4"
    assert browser.find_element(By.ID, "context").get_attribute("value") == query.text
    assert browser.find_element(By.ID, "mention").get_attribute("value") == query.mention

    # A selection (the query's mention, now selected), with another query format: its address
    # holds the passage and the mention's characters.
    browser.find_element(By.ID, "k").clear()
    browser.find_element(By.ID, "k").send_keys("3")
    browser.execute_script("document.getElementById('query-format').value = 'context'")
    browser.find_element(By.ID, "search").click()
    wait_for_text(browser, "summary", "3 hits (ranks 1–3)")
    fragment = parse_qs(urlsplit(browser.current_url).fragment)
    assert fragment == {"context": [query.text], "start": [str(query.start)], "end": [str(query.end)], "k": ["3"],
                        "retriever": ["bm25"], "query_format": ["context"]}
    selection = hits_shown(browser)
    assert selection == [hit["passage_id"] for hit in api_hits(
        plain_server, context=query.text, start=query.start, end=query.end, k=3, query_format="context")]
    selection_address = browser.current_url

    # Back goes to the search before (the dataset query's second page), forward to the selection again.
    browser.back()
    WebDriverWait(browser, WAIT).until(lambda d: "4 hits (ranks 5–8)" in d.find_element(By.ID, "summary").text)
    assert hits_shown(browser) == shown
    assert browser.find_element(By.ID, "query-format").get_attribute("value") == "mention"
    browser.forward()
    WebDriverWait(browser, WAIT).until(lambda d: "3 hits (ranks 1–3)" in d.find_element(By.ID, "summary").text)
    assert hits_shown(browser) == selection

    browser.get("about:blank")
    browser.get(selection_address)
    wait_for_text(browser, "summary", "3 hits (ranks 1–3)")
    assert hits_shown(browser) == selection
    assert browser.find_element(By.ID, "mention-where").text == f"characters {query.start}–{query.end} (selected)"
    assert browser.find_element(By.ID, "mention").get_attribute("value") == query.mention
    assert browser.find_element(By.ID, "query-format").get_attribute("value") == "context"

    # An address the page cannot read says so.
    browser.get("about:blank")
    browser.get(plain_server + "#qid=x&k=ten")
    wait_for_text(browser, "error", "k=ten: not a whole number")


def test_the_cluster_view_lists_the_query_mentions_cluster_by_document(
        browser: Any, subset_index: Path, subset_dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    root = tmp_path_factory.mktemp("cluster-models")
    base = tiny_bert(subset_dataset, root / "bert")
    encoder = save_mention_encoder(base, root / "encoder")
    engine = SearchEngine.open(subset_index, SearchOptions(
        bm25=BM25Options(query_format="mention"), retrieval=RetrievalOptions("bm25", device="cpu"),
        reader=ReaderOptions(saved_reader(base, root / "reader"), RERANK_K, device="cpu"),
        expansion=ExpansionOptions(encoder=encoder)), subset_dataset)
    running = ServerThread(create_app(engine, threads=2)).start()
    try:
        query = subset_query(subset_dataset)
        expected = httpx.post(f"{running.url}search", json={"qid": query.id, "k": 5, "cluster": True},
                              timeout=WAIT).json()["cluster"]
        browser.get(running.url)
        wait_for_text(browser, "server-info", "retrievers bm25")
        assert browser.find_element(By.ID, "cluster").get_attribute("hidden") is not None  # nothing asked yet
        k = browser.find_element(By.ID, "k")
        k.clear()
        k.send_keys("5")
        browser.find_element(By.ID, "as-cluster").click()
        browser.find_element(By.ID, "qid").send_keys(query.id)
        browser.find_element(By.ID, "open-query").click()
        WebDriverWait(browser, WAIT).until(lambda d: d.find_element(By.ID, "cluster").is_displayed(),
                                           "the cluster view never showed")
        summary = browser.find_element(By.ID, "cluster-summary").text
        assert summary.startswith(f"The query mention and {expected['size'] - 1} other mention")
        documents = browser.find_elements(By.CSS_SELECTOR, "#cluster-documents > li")
        assert len(documents) == len(expected["documents"])
        marks = [mark.text for mark in browser.find_elements(By.CSS_SELECTOR, "#cluster-documents .cluster-mark")]
        assert marks == [m["mention"] for d in expected["documents"] for m in d["mentions"]]
        misses = [m.text for m in browser.find_elements(By.CSS_SELECTOR, "#cluster-misses .cluster-mark")]
        assert misses == [m["mention"] for m in expected["near_misses"]]
        # The page shows the API's cut and each member's and near miss's score: the same answer, the same cut.
        assert f"with a score of at least {expected['threshold']}" in summary
        scores = [item.text for item in browser.find_elements(By.CSS_SELECTOR, ".cluster-mention .muted")]
        assert scores == [f"#{m['rank']} {m['passage_id']} · score {m['score']:.3f} ·" for m in
                          [m for d in expected["documents"] for m in d["mentions"]] + expected["near_misses"]]
        assert all(m["score"] >= expected["threshold"] for d in expected["documents"] for m in d["mentions"])
        # Every hit was read (k = rerank_k): the candidates are the hits' detected mentions and the reader's spans
        # that overlap none of them, and the page says so.
        assert expected["candidates"] == "detected" and expected["reader"] is True
        assert browser.find_element(By.ID, "cluster-source").text.endswith("and reader spans that overlap none")
        assert "cluster=true" in browser.current_url  # the address keeps it: a copied address asks again
    finally:
        running.stop()


# --- plain documents nobody annotated: where the mentions came from ------------------------------------------------

PLAIN_CONTEXT = "Aftershocks followed the earthquake that struck northern California on Monday."
PLAIN_K = 5


@pytest.fixture(scope="module")
def unannotated(tiny_base: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The news corpus as plain .txt files (no annotation at all), built and indexed with Lucene, and a tiny
    mention encoder."""
    root = tmp_path_factory.mktemp("unannotated")
    _, index = plain_news_collection(root)
    return index, save_mention_encoder(tiny_base, root / "encoder")


def unannotated_server(index: Path, encoder: Path, candidates: str | None = None) -> ServerThread:
    """A server over the plain documents whose every search has a second round (its --rounds 2; the page has no
    control of its own for it), with the cluster answer on the page's asking."""
    expansion = ExpansionOptions(rounds=2, expand=3, min_similarity=-1, encoder=encoder, candidates=candidates)
    engine = SearchEngine.open(index, SearchOptions(bm25=BM25Options(query_format="mention"),
                                                   retrieval=RetrievalOptions("bm25", device="cpu"),
                                                   expansion=expansion))
    return ServerThread(create_app(engine, threads=2)).start()


def ask_for_the_cluster(driver: Any, url: str) -> None:
    """Type the passage and its mention, tick "as a cluster" and search, until the cluster view shows."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(url)
    wait_for_text(driver, "server-info", "retrievers bm25")
    assert not driver.find_element(By.ID, "legend-gold").is_displayed()  # no dataset: nothing annotated to show
    k = driver.find_element(By.ID, "k")
    k.clear()
    k.send_keys(str(PLAIN_K))
    driver.find_element(By.ID, "context").send_keys(PLAIN_CONTEXT)
    driver.find_element(By.ID, "mention").send_keys("earthquake")
    driver.find_element(By.ID, "as-cluster").click()
    driver.find_element(By.ID, "search").click()
    WebDriverWait(driver, WAIT).until(lambda d: d.find_element(By.ID, "cluster").is_displayed(),
                                      "the cluster view never showed")


def cluster_marks(driver: Any, selector: str) -> list[str]:
    from selenium.webdriver.common.by import By

    return [mark.text for mark in driver.find_elements(By.CSS_SELECTOR, f"{selector} .cluster-mark")]


def test_on_plain_documents_the_cluster_view_says_its_mentions_were_detected(
        browser: Any, unannotated: tuple[Path, Path]) -> None:
    from selenium.webdriver.common.by import By

    running = unannotated_server(*unannotated)
    try:
        answer = httpx.post(f"{running.url}search", json={"context": PLAIN_CONTEXT, "mention": "earthquake",
                                                          "k": PLAIN_K, "cluster": True}, timeout=WAIT).json()
        cluster, expansion = answer["cluster"], answer["expansion"]
        assert (cluster["candidates"], cluster["detector"], cluster["detected"]) == (
            "detected", "heuristic", "at query time")
        assert "note" not in cluster and cluster["passages_without_mentions"] < PLAIN_K
        assert expansion["candidates"] == "detected" and expansion["queries"] and "note" not in expansion
        ask_for_the_cluster(browser, running.url)

        # The cluster: the detected mentions, by document and among the near misses, as the API gave them.
        in_cluster = [m["mention"] for d in cluster["documents"] for m in d["mentions"]]
        assert cluster_marks(browser, "#cluster-documents") == in_cluster
        assert cluster_marks(browser, "#cluster-misses") == [m["mention"] for m in cluster["near_misses"]]
        assert in_cluster or cluster["near_misses"]
        summary = browser.find_element(By.ID, "cluster-summary").text
        assert summary.startswith(f"The query mention and {cluster['size'] - 1} other mention")
        source = browser.find_element(By.ID, "cluster-source").text
        without = cluster["passages_without_mentions"]
        assert source == "From mentions detected by heuristic at query time" + (
            f" · no mention found in {without} of the hits" if without else "")
        assert not browser.find_element(By.ID, "cluster-note").is_displayed()

        # The second round (the server's --rounds 2): the mentions it searched from, and where they came from.
        assert browser.find_element(By.ID, "expansion").is_displayed()
        shown = browser.find_element(By.ID, "expansion-summary").text
        queries = expansion["queries"]
        assert shown.startswith(f"Second round from {len(queries)} coreferring mention")
        assert all(f"“{q['mention']}” ({q['passage_id']})" in shown for q in queries)
        assert "· mentions detected by heuristic at query time" in shown
        assert not browser.find_element(By.ID, "expansion-note").is_displayed()
    finally:
        running.stop()


def test_on_plain_documents_the_annotated_mentions_asked_for_give_a_visible_note(
        browser: Any, unannotated: tuple[Path, Path]) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    running = unannotated_server(*unannotated, candidates="gold")
    try:
        answer = httpx.post(f"{running.url}search", json={"context": PLAIN_CONTEXT, "mention": "earthquake",
                                                          "k": PLAIN_K, "cluster": True}, timeout=WAIT).json()
        cluster, expansion = answer["cluster"], answer["expansion"]
        hits = len(answer["hits"])
        assert hits and cluster["candidates"] == "gold" and cluster["passages_without_mentions"] == hits
        assert cluster["note"].endswith("the cluster is the query mention alone")
        assert expansion["queries"] == [] and expansion["note"].endswith("the answer is the first round's")
        ask_for_the_cluster(browser, running.url)

        assert browser.find_element(By.ID, "cluster-summary").text.startswith("The query mention and 0 other mentions")
        assert cluster_marks(browser, "#cluster-documents") == []
        assert browser.find_element(By.ID, "cluster-source").text == (
            f"From annotated (gold) mentions — an upper bound · no mention found in {hits} of the hits")
        # The note: on the page, in words, not in a tooltip.
        note = browser.find_element(By.ID, "cluster-note")
        assert note.is_displayed() and note.text == f"Note: {cluster['note']}."
        assert note.value_of_css_property("background-color") == "rgba(255, 243, 209, 1)"  # the notice's yellow
        assert browser.find_element(By.ID, "expansion-summary").text.startswith(
            "Second round: no coreferring mention in the top 3 passages · annotated (gold) mentions — an upper bound")
        expansion_note = browser.find_element(By.ID, "expansion-note")
        assert expansion_note.is_displayed() and expansion_note.text == f"Note: {expansion['note']}."

        # The next search, not as a cluster, hides the cluster and its note; the second round is the server's.
        browser.find_element(By.ID, "as-cluster").click()
        browser.find_element(By.ID, "search").click()
        WebDriverWait(browser, WAIT).until(lambda d: not d.find_element(By.ID, "cluster").is_displayed(),
                                           "the cluster view stayed")
        assert browser.find_element(By.ID, "expansion-note").is_displayed()  # the second round is the server's
    finally:
        running.stop()
