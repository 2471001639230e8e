"""The browser client in a real Chromium (Debian's), driven by Playwright, against a real server.

The microphone, and a shared tab's sound, are Chromium's fake capture device playing a
WAV file. Screenshots of the page are kept in tests/artifacts/.
"""

import asyncio
import base64
import shutil
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from playwright.async_api import async_playwright

from audio_fixtures import SAMPLE_WAV, SPEAKERS, dialogue, read_wav, speak, words_of, write_wav
from conftest import serve_fake, serve_real

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(__file__).parent / "artifacts"
# As root in a container, with no network beyond loopback: no sandbox, no background calls.
BASE_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--autoplay-policy=no-user-gesture-required",
]


@pytest.fixture(scope="module")
async def server(models_dir):
    running = await serve_real(models_dir, diarization={"source": "bundle"})
    yield f"http://127.0.0.1:{running.port}"
    await running.stop()


async def launch(playwright, microphone: Path | None = None):
    args = list(BASE_ARGS)
    if microphone is not None:
        args += [
            "--use-fake-device-for-media-stream",
            "--use-fake-ui-for-media-stream",
            f"--use-file-for-fake-audio-capture={microphone}%noloop",
        ]
    return await playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=args)


async def test_page_transcribes_the_microphone_with_speakers(server, tmp_path):
    """sample.wav as the microphone: the page shows its words as segments, by two speakers."""
    ARTIFACTS.mkdir(exist_ok=True)
    microphone = write_wav(tmp_path / "sample.wav", read_wav(SAMPLE_WAV)[6 * 16000 :])
    async with async_playwright() as playwright:
        browser = await launch(playwright, microphone)
        page = await browser.new_page()
        errors = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        heard = []  # every text message the page received, kept for a failure's diagnosis
        page.on(
            "websocket",
            lambda ws: ws.on(
                "framereceived",
                lambda frame: heard.append(frame) if isinstance(frame, str) else None,
            ),
        )
        await page.goto(f"{server}/?autostart=1")
        # Locators, not wait_for_function: the page's CSP forbids the eval that needs.
        await page.locator(".segment", has_text="Chicago").first.wait_for(timeout=90_000)
        await page.wait_for_timeout(9_000)  # the conversation's last words, and their speakers
        await page.click("#stop")
        await page.locator("#state", has_text="closed").wait_for(timeout=60_000)
        await page.screenshot(path=str(ARTIFACTS / "browser.png"), full_page=True)
        segments = await page.eval_on_selector_all(
            ".segment", "els => els.map(e => ({speaker: e.dataset.speaker, text: e.textContent}))"
        )
        shown_error = await page.text_content("#error")
        shown = await page.eval_on_selector_all(".run", "els => els.map(e => e.lastChild.data)")
        shown_by = await page.eval_on_selector_all(
            ".run", "els => els.map(e => e.querySelector('.speaker')?.dataset.speaker ?? '')"
        )
        async with page.expect_download() as download:
            await page.click("button[data-format=srt]")
        subtitles = Path(await (await download.value).path()).read_text()
        async with page.expect_download() as download:
            await page.click("button[data-format=txt]")
        text = Path(await (await download.value).path()).read_text()
        await browser.close()
    (ARTIFACTS / "browser-messages.jsonl").write_text("".join(f"{m}\n" for m in heard))
    assert errors == [] and not shown_error.strip(), (errors, shown_error)
    # the subtitles as the server writes them: every word shown, on cues of at most two
    # lines of 42 characters (after the speaker's name)
    cues = [cue.splitlines()[2:] for cue in subtitles.strip().split("\n\n")]
    assert all(1 <= len(lines) <= 2 for lines in cues), cues
    assert all(len(line.split(": ", 1)[-1]) <= 42 for lines in cues for line in lines), cues
    said = " ".join(line.split(": ", 1)[-1] for lines in cues for line in lines)
    assert words_of(said) == words_of(" ".join(shown)), cues
    # the text download: a line for each run of one speaker's words, as the page shows them
    lines = [line.split("] ", 1)[1].split(": ", 1) for line in text.strip().splitlines()]
    assert [(who, words_of(said)) for who, said in lines] == [
        (who, words_of(run)) for who, run in zip(shown_by, shown, strict=True)
    ], text
    words = set(words_of(" ".join(s["text"] for s in segments)))
    assert {"hello", "jersey", "chicago", "yankee"} <= words, segments
    assert len({s["speaker"] for s in segments if s["speaker"]}) >= 2, segments


CAPTURE_HANDLES = """
const share = navigator.mediaDevices.getDisplayMedia.bind(navigator.mediaDevices);
navigator.mediaDevices.getDisplayMedia = async (constraints) => {
  const shared = await share(constraints);
  window.sharedTrack = shared.getAudioTracks()[0];
  if (window.shareNoSound) shared.getAudioTracks().forEach((t) => shared.removeTrack(t));
  return shared;
};
const microphone = navigator.mediaDevices.getUserMedia.bind(navigator.mediaDevices);
navigator.mediaDevices.getUserMedia = async (constraints) => {
  if (!window.microphoneClip) return microphone(constraints);
  const context = new AudioContext({ sampleRate: 16000 });
  const buffer = context.createBuffer(1, window.microphoneClip.length, 16000);
  buffer.copyToChannel(window.microphoneClip, 0);
  const clip = context.createBufferSource();
  const out = context.createMediaStreamDestination();
  clip.buffer = buffer;
  clip.connect(out);
  clip.start();
  return out.stream;
};
"""


async def test_page_transcribes_a_meeting_in_a_tab_and_you_apart(server, tmp_path):
    """A tab shared without its sound is an error that says so. Source "a meeting in a
    tab, and you", a microphone chosen by name from the page's list: two sessions, the
    tab's (Chromium's fake screen capture playing the clip) by its speakers; the
    microphone playing the clip too, as loudspeakers' echo reaches it, its finals are
    hidden as that echo; when the sharing ends (the browser's "Stop sharing") both
    sessions end. A microphone saying other words: yours, shown as You. Then "a tab's
    sound mixed with the microphone": both heard in one session, and the page says so."""
    # Chromium plays the clip from when the tab is shared, before the session is open:
    # its first seconds silent, so that no word is said before the stream is heard.
    said = read_wav(SAMPLE_WAV)[12 * 16000 : 18 * 16000]
    clip = write_wav(tmp_path / "meeting.wav", np.concatenate([np.zeros(2 * 16000), said]))
    mine = np.concatenate([np.zeros(16000), speak("Good morning everyone, the report is ready.")])
    async with async_playwright() as playwright:
        browser = await launch(playwright, clip)
        page = await browser.new_page()
        errors = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        # Handles on the captures: what ends the shared track here is what the browser's
        # "Stop sharing" bar ends it with, its "ended" event; a microphone saying words
        # of its own where Chromium's fake one can only play the tab's clip.
        await page.add_init_script(CAPTURE_HANDLES)
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
            await texas.first.wait_for(state="attached", timeout=60_000)
        meeting = await page.text_content("#inputs")
        await page.evaluate("window.sharedTrack.dispatchEvent(new Event('ended'))")
        await page.locator("#start:enabled").wait_for(timeout=60_000)  # both sessions closed
        echoed = await page.eval_on_selector_all(".segment", SEGMENTS)
        pcm = base64.b64encode(mine.astype("<f4").tobytes()).decode()
        await page.evaluate(
            "b64 => { window.microphoneClip = new Float32Array("
            "Uint8Array.from(atob(b64), (c) => c.charCodeAt(0)).buffer); }",
            pcm,
        )
        await page.click("#start")
        await page.locator('.segment[data-speaker="You"]', has_text="morning").wait_for(
            timeout=60_000
        )
        ARTIFACTS.mkdir(exist_ok=True)
        await page.screenshot(path=str(ARTIFACTS / "browser-meeting.png"), full_page=True)
        await page.evaluate("window.sharedTrack.dispatchEvent(new Event('ended'))")
        await page.locator("#start:enabled").wait_for(timeout=60_000)
        spoken = await page.eval_on_selector_all(".segment", SEGMENTS)
        await page.evaluate("window.microphoneClip = null")
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
    # the microphone's echo of the tab: heard, and hidden
    echoes = [s for s in echoed if s["speaker"] == "You"]
    assert {"texas", "chicago"} <= set(words_of(" ".join(s["text"] for s in echoes))), echoed
    assert all(s["hidden"] for s in echoes), echoed
    theirs = [s for s in echoed if s["speaker"] != "You"]
    assert {"jersey", "texas", "chicago"} <= set(words_of(" ".join(s["text"] for s in theirs)))
    # the tab's voices by the server's labels (a last word cut off by the end: none)
    assert any(s["speaker"].startswith("S") for s in theirs), echoed
    assert all(s["speaker"].startswith("S") or not s["speaker"] for s in theirs), echoed
    assert not any(s["hidden"] for s in theirs), echoed
    # words of your own: shown as yours
    yours = [s for s in spoken[len(echoed) :] if s["speaker"] == "You"]
    assert yours and not any(s["hidden"] for s in yours), spoken
    assert {"morning", "report", "ready"} <= set(words_of(" ".join(s["text"] for s in yours)))
    assert mixed.startswith("tab: ") and mixed.endswith(" + microphone: Fake Audio Input 2"), mixed


SEGMENTS = (
    "els => els.map(e => ({speaker: e.dataset.speaker, text: e.textContent, hidden: e.hidden}))"
)


async def test_page_transcribes_a_chosen_recording_with_speakers(server, tmp_path):
    """A recording chosen on the page: its segments shown, by two speakers, the words
    sample.wav says (streamed), the voice of a known voice's clip by its name; a file
    ffmpeg cannot read is an error shown, not a hang; with speakers unticked, the same
    words without speakers (verbose_json)."""
    sample = read_wav(SAMPLE_WAV)
    recording = write_wav(tmp_path / "call.wav", sample[6 * 16000 : 22 * 16000])
    host = write_wav(tmp_path / "host.wav", sample[22 * 16000 : 28 * 16000])  # not in the call
    junk = tmp_path / "junk.wav"
    junk.write_bytes(b"not audio at all" * 64)
    async with async_playwright() as playwright:
        browser = await launch(playwright)
        page = await browser.new_page()
        errors = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        await page.goto(server)
        page.once("dialog", lambda dialog: asyncio.ensure_future(dialog.accept("host")))
        await page.set_input_files("#voice", str(host))  # "Whose voice is this?"
        await page.locator("#voices", has_text="host").wait_for(timeout=10_000)
        await page.set_input_files("#file", str(recording))
        await page.locator("#state", has_text="done").wait_for(timeout=90_000)
        segments = await page.eval_on_selector_all(
            ".segment", "els => els.map(e => ({speaker: e.dataset.speaker, text: e.textContent}))"
        )
        await page.set_input_files("#file", str(junk))
        await page.locator("#error", has_text="junk.wav").wait_for(timeout=30_000)
        await page.uncheck("#diarization")
        await page.set_input_files("#file", str(recording))
        await page.locator("#state", has_text="done").wait_for(timeout=90_000)
        plain = await page.eval_on_selector_all(
            ".segment", "els => els.map(e => ({speaker: e.dataset.speaker, text: e.textContent}))"
        )
        await browser.close()
    assert errors == [], errors
    words = set(words_of(" ".join(s["text"] for s in segments)))
    assert {"hello", "jersey", "chicago"} <= words, segments
    assert len({s["speaker"] for s in segments if s["speaker"]}) == 2, segments
    assert "host" in {s["speaker"] for s in segments}, segments
    assert {"hello", "jersey", "chicago"} <= set(words_of(" ".join(s["text"] for s in plain)))
    assert not any(s["speaker"] for s in plain), plain


async def test_parley_js_against_the_server(server, tmp_path):
    """parley.js in the page: refusals reject with the code; decoding options reach the
    server; a known speaker's clip names the label of that voice; audio in, finals and
    a clean end."""
    audio, _ = dialogue(["A", "B"], turns=2)
    pcm = base64.b64encode((audio * 32767).astype("<i2").tobytes()).decode()
    clip = write_wav(
        tmp_path / "ana.wav", speak("Good morning, this is Ana, on the record.", SPEAKERS["A"])
    )
    clip64 = base64.b64encode(clip.read_bytes()).decode()
    async with async_playwright() as playwright:
        browser = await launch(playwright)
        page = await browser.new_page()
        await page.goto(f"{server}/")
        result = await page.evaluate(
            """async ([pcmBase64, clipBase64]) => {
            const { ParleyClient } = await import('/parley.js');
            const refused = new ParleyClient({ url: '/v1/stream', language: 'xx' });
            let refusal;
            try { await refused.connect(); } catch (error) { refusal = error.code; }
            const client = new ParleyClient({ url: '/v1/stream', diarization: true,
                                              keyterms: ['Kubernetes', 'Siobhan'],
                                              redact: ['pci'] });
            const events = [];
            for (const type of ['started', 'speech_started', 'partial', 'final',
                                'speaker_update', 'speaker_names', 'ended', 'closed', 'error']) {
              client.addEventListener(type, (e) => events.push({ type, detail: e.detail }));
            }
            await client.connect(16000);
            const clip = Uint8Array.from(atob(clipBase64), (c) => c.charCodeAt(0));
            await client.knownSpeaker('Ana', new Blob([clip], { type: 'audio/wav' }));
            const bytes = Uint8Array.from(atob(pcmBase64), (c) => c.charCodeAt(0));
            for (let i = 0; i < bytes.length; i += 6400) {
              client.sendAudio(bytes.slice(i, i + 6400).buffer);
            }
            const closed = await client.stop();
            return { refusal, closed, events, sent: client.audioSentSeconds() };
        }""",
            [pcm, clip64],
        )
        await browser.close()
    assert result["refusal"] == "bad_config"
    assert result["closed"]["code"] == 1000
    types = [e["type"] for e in result["events"]]
    assert types[0] == "started" and types[-2:] == ["ended", "closed"] and "error" not in types
    started = result["events"][0]["detail"]  # the decoding options reached the server
    assert started["config"]["keyterms"] == ["Kubernetes", "Siobhan"]
    assert started["config"]["redact"] == ["pci"] and started["model_languages"] == ["en"]
    finals = [e["detail"] for e in result["events"] if e["type"] == "final"]
    assert len(finals) == 2 and all(f["speaker"] in ("S1", "S2") for f in finals)
    named = [e["detail"]["names"] for e in result["events"] if e["type"] == "speaker_names"]
    assert named and named[-1] == {finals[0]["speaker"]: "Ana"}, named  # the first turn's voice
    assert result["sent"] == pytest.approx(len(audio) / 16000, abs=0.01)


async def test_page_is_served_with_types_and_a_content_security_policy(server):
    """/ and the scripts come with their content types, a CSP and nosniff."""

    def headers(path):  # in a thread: the server shares this event loop
        with urllib.request.urlopen(server + path) as response:
            return response.headers

    for path, kind in [
        ("/", "text/html"),
        ("/parley.js", "text/javascript"),
        ("/worklet.js", "text/javascript"),
        ("/style.css", "text/css"),
    ]:
        got = await asyncio.to_thread(headers, path)
        assert got["Content-Type"].startswith(kind)
        assert "script-src 'self'" in got["Content-Security-Policy"]
        assert got["X-Content-Type-Options"] == "nosniff"
    with pytest.raises(urllib.error.HTTPError):
        await asyncio.to_thread(headers, "/../pyproject.toml")


async def test_parley_js_resumes_a_dropped_connection(talk):
    """parley.js through the fault proxy, cut once mid-stream with no close handshake:
    it resumes the session (close 1006 in the browser), sends again the audio the server
    did not get and the end, and its finals equal an uninterrupted stream's."""
    from fault_proxy import FaultProxy, Faults
    from parley.client.stream import run_stream, stream_url
    from parley.protocol.messages import StreamConfig, parse

    audio, _ = talk
    data = (np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes()
    running = await serve_fake(server={"allowed_origins": ["*"]})  # the proxy is another port
    try:

        async def chunks():
            for i in range(0, len(data), 3200):
                yield data[i : i + 3200]

        base = f"ws://127.0.0.1:{running.port}/v1/stream"
        direct = await run_stream(
            stream_url(base, StreamConfig(partials=False), None), chunks(), 32000, fast=True
        )
        async with FaultProxy(running.port, Faults(cut_after=[len(data) // 2])) as proxy:
            async with async_playwright() as playwright:
                browser = await launch(playwright)
                page = await browser.new_page()
                await page.goto(f"http://127.0.0.1:{running.port}/")
                result = await page.evaluate(
                    """async ([url, pcmBase64]) => {
                    const { ParleyClient } = await import('/parley.js');
                    const client = new ParleyClient({ url, partials: false });
                    const finals = [];
                    const seen = [];
                    for (const type of ['final', 'resuming', 'resumed', 'error']) {
                      client.addEventListener(type, (e) => {
                        seen.push(type);
                        if (type === 'final') finals.push(e.detail);
                      });
                    }
                    await client.connect(16000);
                    const bytes = Uint8Array.from(atob(pcmBase64), (c) => c.charCodeAt(0));
                    for (let i = 0; i < bytes.length; i += 3200) {
                      client.sendAudio(bytes.slice(i, i + 3200).buffer);
                      await new Promise((r) => setTimeout(r, 5));
                    }
                    const closed = await client.stop();
                    return { finals, seen, closed, resumes: client.resumes };
                }""",
                    [f"ws://127.0.0.1:{proxy.port}/v1/stream", base64.b64encode(data).decode()],
                )
                await browser.close()
    finally:
        await running.stop()
    assert proxy.cuts == 1 and result["resumes"] == 1, result["seen"]
    assert result["closed"]["code"] == 1000 and "error" not in result["seen"]
    assert [parse(f) for f in result["finals"]] == direct.finals and len(direct.finals) == 3


class _OtherOrigin:
    """A plain page on another loopback port: another origin than the server's, as a web
    application calling Parley from its own site is."""

    def __enter__(self) -> str:
        import http.server
        import threading

        class Page(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                body = b"<!doctype html><title>an application</title>"
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()


async def test_a_page_of_an_allowed_origin_sends_a_recording_with_its_key(tmp_path):
    """From a page of an origin the operator allows, Chromium's preflight passes and the
    answer (a recording's transcript, then the model listing) is readable; from any other
    origin the browser refuses the request (a CORS failure) and no recording is run."""
    KEY = "browser-key"
    speech = write_wav(tmp_path / "hello.wav", read_wav(SAMPLE_WAV)[6 * 16000 : 12 * 16000])
    wav = base64.b64encode(speech.read_bytes()).decode()
    with _OtherOrigin() as allowed, _OtherOrigin() as other:
        running = await serve_fake(token=KEY, server={"allowed_origins": [allowed]})
        try:
            parley = f"http://127.0.0.1:{running.port}"
            async with async_playwright() as playwright:
                browser = await launch(playwright)
                answers = {}
                for origin in (allowed, other):
                    page = await browser.new_page()
                    await page.goto(f"{origin}/")
                    answers[origin] = await page.evaluate(
                        """async ([url, key, wavBase64]) => {
                        const bytes = Uint8Array.from(atob(wavBase64), (c) => c.charCodeAt(0));
                        const form = new FormData();
                        form.append('file', new Blob([bytes], { type: 'audio/wav' }), 'a.wav');
                        form.append('model', 'whisper-1');
                        const headers = { Authorization: 'Bearer ' + key };
                        try {
                          const posted = await fetch(url + '/v1/audio/transcriptions',
                                                     { method: 'POST', body: form, headers });
                          const listed = await fetch(url + '/v1/models', { headers });
                          return { status: posted.status, body: await posted.json(),
                                   models: (await listed.json()).data.map((m) => m.id) };
                        } catch (error) {
                          return { error: String(error) };
                        }
                    }""",
                        [parley, KEY, wav],
                    )
                await browser.close()
            jobs = running.service.metrics.render().decode()
        finally:
            await running.stop()
    assert answers[allowed]["status"] == 200, answers[allowed]
    assert answers[allowed]["body"]["text"] and answers[allowed]["models"]
    assert "Failed to fetch" in answers[other].get("error", ""), answers[other]
    assert 'parley_file_jobs_total{outcome="done"} 1.0' in jobs  # the allowed page's alone
