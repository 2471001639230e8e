"""The browser page's sources in a real Chromium (Debian's), driven by Playwright, against
a real server: a tab's sound (Chromium's fake screen capture), a meeting in a tab and
the microphone as two sessions, and the two mixed. A screenshot of the meeting is kept
in tests/artifacts/.
"""

import numpy as np
import pytest
from playwright.async_api import async_playwright

from audio_fixtures import SAMPLE_WAV, read_wav, words_of, write_wav
from conftest import serve_real
from test_browser import ARTIFACTS, launch


@pytest.fixture(scope="module")
async def server(models_dir):
    running = await serve_real(models_dir, diarization={"source": "bundle"})
    yield f"http://127.0.0.1:{running.port}"
    await running.stop()


SHARED_TRACK_HANDLE = """
const share = navigator.mediaDevices.getDisplayMedia.bind(navigator.mediaDevices);
navigator.mediaDevices.getDisplayMedia = async (constraints) => {
  const shared = await share(constraints);
  window.sharedTrack = shared.getAudioTracks()[0];
  if (window.shareNoSound) shared.getAudioTracks().forEach((t) => shared.removeTrack(t));
  return shared;
};
"""


async def test_page_transcribes_a_meeting_in_a_tab_and_you_apart(server, tmp_path):
    """A tab shared without its sound is an error that says so. Source "a meeting in a
    tab, and you", a microphone chosen by name from the page's list: two sessions, the
    tab's (Chromium's fake screen capture playing the clip) by its speakers, the
    microphone's (playing it too) as You; when the sharing ends (the browser's "Stop
    sharing") both end with their words. Then "a tab's sound mixed with the microphone":
    both heard in one session, and the page says so."""
    # Chromium plays the clip from when the tab is shared, before the session is open:
    # its first seconds silent, so that no word is said before the stream is heard.
    said = read_wav(SAMPLE_WAV)[12 * 16000 : 18 * 16000]
    clip = write_wav(tmp_path / "meeting.wav", np.concatenate([np.zeros(3 * 16000), said]))
    async with async_playwright() as playwright:
        browser = await launch(playwright, clip)
        page = await browser.new_page()
        errors = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        # A handle on the shared track: what ends it here is what the browser's "Stop
        # sharing" bar ends it with, its "ended" event.
        await page.add_init_script(SHARED_TRACK_HANDLE)
        await page.goto(server)
        await page.select_option("#source", "tab")
        assert await page.is_hidden("#microphone")  # no microphone is heard
        await page.evaluate("window.shareNoSound = true")  # "Share tab audio" left unticked
        await page.click("#start")  # sharing a tab needs the user's click
        no_sound = await page.locator("#error", has_text="no sound").text_content(timeout=30_000)
        await page.evaluate("window.shareNoSound = false")
        await page.select_option("#source", "meeting")
        await page.select_option("#microphone", label="Fake Audio Input 2")
        await page.click("#start")
        for speaker in ("You", "S"):  # the clip's last words, in both sessions
            texas = page.locator(f'.segment[data-speaker^="{speaker}"]', has_text="Texas")
            await texas.first.wait_for(timeout=60_000)
        meeting = await page.text_content("#inputs")
        ARTIFACTS.mkdir(exist_ok=True)
        await page.screenshot(path=str(ARTIFACTS / "browser-meeting.png"), full_page=True)
        await page.evaluate("window.sharedTrack.dispatchEvent(new Event('ended'))")
        await page.locator("#start:enabled").wait_for(timeout=60_000)  # both sessions closed
        segments = await page.eval_on_selector_all(
            ".segment", "els => els.map(e => ({speaker: e.dataset.speaker, text: e.textContent}))"
        )
        await page.select_option("#source", "tab+microphone")
        await page.click("#start")
        await page.locator("#state", has_text="streaming").wait_for(timeout=30_000)
        mixed = await page.text_content("#inputs")
        await page.click("#stop")
        await page.locator("#state", has_text="closed").wait_for(timeout=60_000)
        listed = await page.eval_on_selector_all("#microphone option", "os => os.map(o => o.text)")
        shown_error = await page.text_content("#error")
        await browser.close()
    assert errors == [] and not shown_error.strip(), (errors, shown_error)
    assert 'tick "Share tab audio"' in no_sound, no_sound
    assert listed == ["default microphone", "Fake Audio Input 1", "Fake Audio Input 2"], listed
    assert meeting.startswith("tab: ") and meeting.endswith(" + microphone: Fake Audio Input 2")
    yours = [s["text"] for s in segments if s["speaker"] == "You"]
    theirs = [s for s in segments if s["speaker"] != "You"]
    assert {"jersey", "texas", "chicago"} <= set(words_of(" ".join(yours))), segments
    assert {"jersey", "texas", "chicago"} <= set(words_of(" ".join(s["text"] for s in theirs)))
    # the tab's voices by the server's labels (a last word cut off by the end: none)
    assert any(s["speaker"].startswith("S") for s in theirs), segments
    assert all(s["speaker"].startswith("S") or not s["speaker"] for s in theirs), segments
    assert mixed.startswith("tab: ") and mixed.endswith(" + microphone: Fake Audio Input 2"), mixed
