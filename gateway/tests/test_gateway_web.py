"""The web page in a real headless Chromium (Debian's `chromium`, driven by Playwright through
`executable_path`): with API keys on, it asks for the key, lists collections, streams an answer, shows its
cited sources and the whole document, keeps the conversation across a reload, searches and uploads. The mesh
is real (hash embedder), the chat model the local fake, slowed down so the stream can be watched.

The screenshot of the answer is checked for what a person sees: the answer and its sources are on screen, in
boxes that are not empty and not blank."""

from __future__ import annotations

import io
import re
import shutil
from pathlib import Path

import pytest
from ragmesh.indexer.v1 import indexer_service_pb2 as indexer_pb
from ragmesh_gateway.app import run_gateway
from ragmesh_gateway.config import GatewaySettings

from tests.support.zoo import PANDA_ANSWER, ingest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="Debian's chromium is not installed (scripts/system-deps.sh installs it; needs apt)"
)
KEY = "web-key"
WALK_PATH = "libs/common/ragmesh_common/walk.py"
WALK = Path(__file__).resolve().parents[2] / WALK_PATH
LAUNCH_ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
    "--disable-dev-shm-usage",
]


@pytest.fixture(scope="module")
async def site(mesh_factory, fake_chat):
    mesh = await mesh_factory(answer={"base_url": fake_chat.url, "model": "fake-chat", "min_relevance": 0.15})
    await ingest(mesh)
    # A source file read from a folder: its chunks carry their path and lines.
    await mesh.stub("indexer").IngestDocument(
        indexer_pb.IngestDocumentRequest(
            document=indexer_pb.DocumentInput(
                collection="code",
                file=indexer_pb.FileInput(data=WALK.read_bytes(), filename=WALK.name, path=WALK_PATH),
            )
        )
    )
    addrs = {f"{name}_addr": addr for name, addr in mesh.addrs.items()}
    async with run_gateway(GatewaySettings(http_port=0, api_keys=KEY, **addrs)) as url:
        yield url


@pytest.fixture(scope="module")
async def browser():
    playwright_api = pytest.importorskip("playwright.async_api", reason="playwright is not installed")
    async with playwright_api.async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        yield browser
        await browser.close()


@pytest.fixture
async def page(site, browser):
    """A fresh browser context (nothing stored yet: no key, no conversation) on the page."""
    context = await browser.new_context(viewport={"width": 1200, "height": 900})
    try:
        page = await context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        # Script errors fail the test; the browser's own "Failed to load resource" lines (the 401 before the
        # key, the 404 of NO_RESULTS) are answers the page handles.
        page.on(
            "console",
            lambda msg: (
                errors.append(msg.text)
                if msg.type == "error" and not msg.text.startswith("Failed to load resource")
                else None
            ),
        )
        await page.goto(site)
        yield page
        assert errors == [], errors
    finally:
        await context.close()


def assert_not_blank(png: bytes, what: str) -> None:
    """The picture holds more than one colour in quantity: text on a background, not an empty box."""
    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("L")
    histogram = image.histogram()
    dominant = max(histogram) / sum(histogram)
    assert image.width > 50 and image.height > 20, what
    assert dominant < 0.97, f"{what}: {dominant:.1%} of its pixels are one shade"


async def ask(page, question: str) -> None:
    await page.fill("#question", question)
    await page.press("#question", "Enter")


async def test_the_page_asks_streams_and_shows_cited_sources(page, fake_chat, tmp_path):
    # With RAGMESH_API_KEYS set the first API call is refused: the page asks for the key.
    await page.wait_for_selector("#key-dialog[open]")
    await page.fill("#key-input", KEY)
    await page.click("#key-save")
    await page.click("#collections button[data-name='zoo']")
    assert await page.text_content("#current-collection") == "zoo"

    fake_chat.reset()
    fake_chat.token_delay = 0.05  # ~1 s for the answer, so the stream can be seen arriving
    try:
        await ask(page, "What do giant pandas eat?")
        # Some of the answer on screen while it is still being written (before its last piece, the citation).
        partial = await page.wait_for_function(
            "() => { const a = document.querySelector('.answer.streaming'); "
            "return a && a.textContent.length > 0 && !a.textContent.trim().endsWith(']') && a.textContent; }"
        )
        partial_text = await partial.json_value()
        await page.wait_for_selector(".turn .sources li")
    finally:
        fake_chat.token_delay = 0
    answer = page.locator(".turn").first.locator(".answer")
    final_text = await answer.text_content()
    assert final_text == f"{PANDA_ANSWER} [1]"
    assert PANDA_ANSWER.startswith(partial_text.strip()) and len(partial_text) < len(final_text)  # it streamed
    assert await answer.locator("a.cite").text_content() == "[1]"
    first = page.locator(".turn").first.locator(".sources li").first
    assert await first.get_attribute("class") == "cited"
    assert await first.locator(".title").text_content() == "Giant pandas"
    assert "bamboo" in await first.locator(".snippet").text_content()
    assert "fake-chat" in await page.locator(".turn .generator").first.text_content()

    shot = await page.screenshot(full_page=True)
    (tmp_path / "ask.png").write_bytes(shot)  # to look at: pytest --basetemp=DIR keeps it
    assert_not_blank(shot, "the page")
    for name, locator in (("answer", answer), ("sources", page.locator(".turn .sources").first)):
        assert await locator.is_visible(), name
        box = await locator.bounding_box()
        assert box and box["width"] > 100 and box["height"] > 15, (name, box)
        assert_not_blank(await locator.screenshot(), name)

    # The whole document, fetched with the key, in a dialog.
    await first.locator("a.open").click()
    await page.wait_for_selector("#doc-dialog[open]")
    assert "Sichuan" in await page.text_content("#doc-text")
    await page.click("#doc-dialog button[value=close]")

    # A follow-up in the same conversation, then a reload: the conversation comes back from the session.
    await ask(page, "And where do they live?")
    await page.wait_for_selector(".turn:nth-of-type(2) .sources li")
    assert await page.locator(".turn:nth-of-type(2) .sources li").first.get_attribute("data-doc-id") == "panda"
    await page.reload()
    await page.wait_for_selector(".turn:nth-of-type(2) .answer")
    assert await page.locator(".turn .question").all_text_contents() == [
        "What do giant pandas eat?",
        "And where do they live?",
    ]
    # A new conversation forgets it.
    await page.click("#new-conversation")
    await page.wait_for_function("() => document.querySelectorAll('.turn').length === 0")
    await page.reload()
    await page.wait_for_selector("#collections button[data-name='zoo']")
    assert await page.locator(".turn").count() == 0


async def test_the_page_searches_uploads_and_shows_errors(page, tmp_path):
    await page.wait_for_selector("#key-dialog[open]")
    await page.fill("#key-input", KEY)
    await page.click("#key-save")
    await page.click("#collections button[data-name='zoo']")

    await page.check("input[name=mode][value=search]")
    await ask(page, "bread dough yeast")
    await page.wait_for_selector(".turn .sources li")
    assert await page.locator(".turn .sources li .title").first.text_content() == "Bread"
    # The results are the reply: no empty answer block above them.
    assert await page.locator(".turn .answer").first.is_hidden()

    # A hit in a source file says where: path:first-last line.
    await page.click("#collections button[data-name='code']")
    await ask(page, "walk the folder and skip secret files")
    hit_lines = page.locator(".turn").last.locator(".sources li .lines").first
    await hit_lines.wait_for()
    lines = await hit_lines.text_content()
    assert re.fullmatch(re.escape(WALK_PATH) + r":\d+-\d+", lines), lines
    await page.click("#collections button[data-name='zoo']")

    note = tmp_path / "otters.md"
    note.write_text(
        "# Otters\n\nSea otters hold hands (`hold_hands=True`, see [the study](https://example.org/otters)) while "
        "they sleep so they do not drift apart."
    )
    await page.set_input_files("#upload-file", str(note))
    await page.click("#upload-form button[type=submit]")
    await page.wait_for_function("() => document.querySelector('#upload-status').textContent.startsWith('indexed')")
    await page.wait_for_function(
        "() => document.querySelector(\"#collections button[data-name='zoo'] .count\").textContent === '4 docs'"
    )

    await page.check("input[name=mode][value=ask]")
    await ask(page, "xylophone zeppelin quartz")
    await page.wait_for_selector("#error:not([hidden])")
    assert await page.text_content("#error .reason") == "NO_RESULTS"

    # A model's answer with Markdown: code as code, a link as a link, the rest as text.
    await ask(page, "why do sea otters hold hands while they sleep")
    reply = page.locator(".turn").last.locator(".answer")
    await reply.locator("code").wait_for()
    assert await reply.locator("code").text_content() == "hold_hands=True"
    link = reply.locator("a[href='https://example.org/otters']")
    assert await link.text_content() == "the study"
    assert "](" not in await reply.text_content()
    await page.wait_for_selector(".answer.streaming", state="detached")
