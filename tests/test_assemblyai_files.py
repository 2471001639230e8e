"""AssemblyAI's pre-recorded API (protocol.md section 16): ``assemblyai``'s own
``Transcriber`` uploads, asks and polls against the server on loopback; the fake engine
decodes, so a transcript must be exactly what it heard. Its request and answer shapes,
the job bounds and the errors are checked directly."""

import asyncio
import wave

import assemblyai as aai
import httpx
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from audio_fixtures import conversation, write_wav
from conftest import as_received, pcm16
from parley.core.speaker_count import SpeakerCount
from parley.protocol.messages import Final, FinalReason, Word
from parley.recordings.file_results import DecodeReport, FileTranscript
from parley.transport.assemblyai_channels import channel_labelled
from parley.transport.assemblyai_jobs import HELD_S, KEPT_S, AssemblyJobs, Status
from parley.transport.assemblyai_shapes import (
    ECHOED,
    TranscriptAsk,
    completed,
    paragraphs,
    sentences,
)
from parley.transport.upload_errors import UploadError

KEY = "s3cret"
UPLOAD = "http://127.0.0.1:1/v2/upload/" + "ab" * 16


@pytest.fixture(scope="module")
def talk_wav(talk, tmp_path_factory):
    audio, _ = talk
    path = tmp_path_factory.mktemp("aai") / "talk.wav"
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1), out.setsampwidth(2), out.setframerate(16000)
        out.writeframes(pcm16(audio))
    return path


def transcriber(port: int, key: str = KEY) -> aai.Transcriber:
    settings = aai.Settings(api_key=key, base_url=f"http://127.0.0.1:{port}", polling_interval=0.05)
    return aai.Transcriber(client=aai.Client(settings=settings))


async def test_the_sdks_transcriber_gets_its_words_and_subtitles(start, talk, talk_wav):
    """Upload, create, poll: completed, its text exactly the recording's as OpenAI's file
    API gives it (the same pipeline), words in milliseconds within the audio;
    custom_spelling writes a word otherwise and filter_profanity masks what it wrote; the
    SRT export, the sentences and the paragraphs read the same words; a word search finds
    a word where it was said; the listing has both transcripts, the newest first."""
    audio, _ = talk
    _, server = await start(token=KEY)
    plain = await asyncio.to_thread(transcriber(server.port).transcribe, str(talk_wav))
    assert plain.status == aai.TranscriptStatus.completed, plain.error
    async with httpx.AsyncClient(timeout=60) as client:
        openai = await client.post(
            f"http://127.0.0.1:{server.port}/v1/audio/transcriptions",
            files={"file": ("talk.wav", talk_wav.read_bytes())},
            headers={"Authorization": f"Bearer {KEY}"},
        )
    assert plain.text and plain.text == openai.json()["text"]
    assert [w.text for w in plain.words] == plain.text.split()
    assert all(0 <= w.start < w.end <= len(audio) / 16 for w in plain.words)
    assert plain.language_code == "en_us" and plain.audio_duration == round(len(audio) / 16000)
    srt = await asyncio.to_thread(plain.export_subtitles_srt)
    assert srt.startswith("1\n") and plain.words[0].text in srt
    for grouped in (plain.get_sentences, plain.get_paragraphs):
        runs = await asyncio.to_thread(grouped)
        assert " ".join(r.text for r in runs).split() == plain.text.split()
    said = plain.words[1].text
    (found,) = await asyncio.to_thread(plain.word_search, [said])
    assert found.count == plain.text.split().count(said) and 1 in found.indexes
    assert found.timestamps[found.indexes.index(1)] == (plain.words[1].start, plain.words[1].end)

    config = aai.TranscriptionConfig(filter_profanity=True, punctuate=False)
    config.set_custom_spelling({"shit": [f"w{k}" for k in range(10)]})
    sworn = await asyncio.to_thread(
        transcriber(server.port).transcribe, str(talk_wav), config=config
    )
    assert sworn.status == aai.TranscriptStatus.completed, sworn.error
    assert set(sworn.text.split()) == {"s***"} and len(sworn.words) == len(plain.words)
    listed = await asyncio.to_thread(transcriber(server.port).list_transcripts)
    assert [t.id for t in listed.transcripts] == [sworn.id, plain.id]
    assert all(t.status == aai.TranscriptStatus.completed for t in listed.transcripts)
    first_page = await asyncio.to_thread(
        transcriber(server.port).list_transcripts, aai.ListTranscriptParameters(limit=1)
    )
    assert [t.id for t in first_page.transcripts] == [sworn.id]
    assert first_page.page_details.next_url and plain.id not in first_page.page_details.next_url


async def test_the_sdks_multichannel_transcript_names_each_words_channel(start, talk, tmp_path):
    """multichannel=True on a stereo call (the talk on the left, another voice's line on
    the right): two audio channels; each channel's words are exactly what that channel
    alone transcribes to, each word and utterance naming its channel, the utterances'
    speaker being the channel, in time order; dual_channel, AssemblyAI's older name, is
    the same."""
    left, _ = talk
    other, _ = conversation([("en-us", "Please hold while I check the order.")], 1.2, 1.0)
    right = np.zeros_like(left)
    right[: len(other)] = as_received(other)[: len(left)]
    stereo = write_wav(tmp_path / "call.wav", np.stack([left, right]))
    _, server = await start(token=KEY)
    alone = []
    for k, side in enumerate((left, right)):
        mono = write_wav(tmp_path / f"side{k}.wav", side)
        alone.append(await asyncio.to_thread(transcriber(server.port).transcribe, str(mono)))
    for field in ("multichannel", "dual_channel"):
        config = aai.TranscriptionConfig(**{field: True})
        got = await asyncio.to_thread(
            transcriber(server.port).transcribe, str(stereo), config=config
        )
        assert got.status == aai.TranscriptStatus.completed, got.error
        assert got.json_response["audio_channels"] == 2 and got.json_response[field]
        for channel, mono in zip("12", alone):
            assert mono.text and [w.text for w in got.words if w.channel == channel] == [
                w.text for w in mono.words
            ]
        assert {w.speaker for w in got.words} == {"1", "2"}
        assert all(u.speaker == u.channel and u.channel in "12" for u in got.utterances)
        assert [u.start for u in got.utterances] == sorted(u.start for u in got.utterances)
        assert {u.channel for u in got.utterances} == {"1", "2"}


async def test_the_sdks_transcriber_takes_the_part_of_the_file_asked_for(
    start, talk, talk_wav, tmp_path
):
    """audio_start_from and audio_end_at (ms): only the part between them is transcribed,
    timed in the whole file: the words of a file holding just that part (the second
    sentence), each later by the part's start. A part that begins past the end ends the
    job with an error; an end before the start is 400."""
    audio, truth = talk
    _, server = await start(token=KEY)
    start_ms, end_ms = round((truth[1].start - 0.4) * 1000), round((truth[1].end + 0.4) * 1000)
    alone = write_wav(tmp_path / "part.wav", audio[start_ms * 16 : end_ms * 16])
    want = await asyncio.to_thread(transcriber(server.port).transcribe, str(alone))
    config = aai.TranscriptionConfig(audio_start_from=start_ms, audio_end_at=end_ms)
    part = await asyncio.to_thread(transcriber(server.port).transcribe, str(talk_wav), config)
    assert part.status == aai.TranscriptStatus.completed, part.error
    assert want.words and [(w.text, w.start, w.end) for w in part.words] == [
        (w.text, w.start + start_ms, w.end + start_ms) for w in want.words
    ]
    past = aai.TranscriptionConfig(audio_start_from=3_600_000)
    late = await asyncio.to_thread(transcriber(server.port).transcribe, str(talk_wav), past)
    assert late.status == aai.TranscriptStatus.error and "past the recording" in late.error
    with pytest.raises(UploadError):
        TranscriptAsk.of({"audio_url": UPLOAD, "audio_start_from": 5000, "audio_end_at": 5000})


async def test_transcripts_wait_for_a_slot_and_can_be_deleted(start, talk_wav):
    """With one job slot, three transcripts asked at once all complete (queued, not
    refused); a finished one can be deleted, and is gone."""
    _, server = await start(token=None, files={"max_jobs": 1})
    base = f"http://127.0.0.1:{server.port}"
    async with httpx.AsyncClient(base_url=base, timeout=60) as client:
        ids = []
        for _ in range(3):
            upload = await client.post("/v2/upload", content=talk_wav.read_bytes())
            asked = {"audio_url": upload.json()["upload_url"]}
            created = await client.post("/v2/transcript", json=asked)
            assert created.status_code == 200 and created.json()["status"] == "queued"
            ids.append(created.json()["id"])
        for transcript_id in ids:
            for _ in range(400):
                got = (await client.get(f"/v2/transcript/{transcript_id}")).json()
                if got["status"] in ("completed", "error"):
                    break
                await asyncio.sleep(0.05)
            assert got["status"] == "completed", got
        deleted = await client.delete(f"/v2/transcript/{ids[0]}")
        assert deleted.status_code == 200 and deleted.json()["id"] == ids[0]
        gone = await client.get(f"/v2/transcript/{ids[0]}")
        assert gone.status_code == 404 and "error" in gone.json()


async def test_refusals_are_assemblyais_error_shape(start, talk_wav):
    """No key: 401; a URL that is no upload of this server: 400 (nothing is fetched);
    an upload used once, or another key's: 400; speaker_labels on a server without
    speaker models, a PII policy Parley does not redact, a body that is no JSON
    object: 400; an unknown transcript: 404."""
    _, server = await start(token=KEY)
    base = f"http://127.0.0.1:{server.port}"
    async with httpx.AsyncClient(base_url=base, timeout=60) as client:
        assert (await client.post("/v2/upload", content=b"x")).status_code == 401
        auth = {"Authorization": KEY}
        upload = await client.post("/v2/upload", content=talk_wav.read_bytes(), headers=auth)
        url = upload.json()["upload_url"]
        refused = {
            "foreign": {"audio_url": "https://example.com/a.wav"},
            "labels": {"audio_url": url, "speaker_labels": True},
            "policy": {"audio_url": url, "redact_pii": True, "redact_pii_policies": ["email"]},
            "types": {"audio_url": url, "punctuate": "yes"},
        }
        for name, body in refused.items():
            answer = await client.post("/v2/transcript", json=body, headers=auth)
            assert answer.status_code == 400 and answer.json()["error"], name
        not_json = await client.post("/v2/transcript", content=b"[1]", headers=auth)
        assert not_json.status_code == 400
        first = await client.post("/v2/transcript", json={"audio_url": url}, headers=auth)
        assert first.status_code == 200
        again = await client.post("/v2/transcript", json={"audio_url": url}, headers=auth)
        assert again.status_code == 400 and "audio_url" in again.json()["error"]
        missing = await client.get("/v2/transcript/" + "0" * 32, headers=auth)
        assert missing.status_code == 404
        for limit in ("0", "201", "¹", "x"):  # '¹' is a digit to str.isdigit, not to int
            listed = await client.get("/v2/transcript", params={"limit": limit}, headers=auth)
            assert listed.status_code == 400 and "limit" in listed.json()["error"], limit


def test_a_request_becomes_the_recordings_request():
    """AssemblyAI's fields as Parley's: language_code's base, keyterms_prompt and
    word_boost as keyterms, custom_spelling as replacements, PII policies as redaction
    categories (all of them when none is named), speaker options as the count."""
    ask = TranscriptAsk.of(
        {
            "audio_url": UPLOAD,
            "language_code": "en_au",
            "keyterms_prompt": ["Okonkwo"],
            "word_boost": ["Kubernetes"],
            "custom_spelling": [{"from": ["new year"], "to": "Nguyen"}],
            "redact_pii": True,
            "speaker_labels": True,
            "speaker_options": {"min_speakers_expected": 2, "max_speakers_expected": 3},
            "format_text": False,
        }
    )
    job = ask.job
    assert ask.upload_id == "ab" * 16 and job.language == "en" and ask.plain
    assert job.keyterms == ("Okonkwo", "Kubernetes") and job.replace == ("new year:Nguyen",)
    assert job.redact == ("pci", "phone", "ssn") and job.diarize
    assert job.speakers == SpeakerCount(None, 2, 3)
    assert TranscriptAsk.of({"audio_url": UPLOAD, "language_detection": True}).job.language is None
    among = {"expected_languages": ["en_us", "es"]}
    detected = TranscriptAsk.of(
        {"audio_url": UPLOAD, "language_detection": True, "language_detection_options": among}
    ).job
    assert (detected.language, detected.config.languages) == (None, ("en", "es"))
    told = {"audio_url": UPLOAD, "language_code": "de", "language_detection_options": among}
    assert TranscriptAsk.of(told).job.config.languages == ()  # a language given: no detection
    for bad in (
        {"audio_url": UPLOAD, "speakers_expected": 0},
        {"audio_url": UPLOAD, "language_code": "english!"},
        {"audio_url": UPLOAD, "custom_spelling": [{"from": "a", "to": "b"}]},
        {"audio_url": UPLOAD, "audio_start_from": -1},
        {"audio_url": UPLOAD, "audio_end_at": 1.5},
        {"audio_url": UPLOAD, "language_detection": True, "language_detection_options": ["en"]},
        {
            "audio_url": UPLOAD,
            "language_detection": True,
            "language_detection_options": {"expected_languages": ["english!"]},
        },
    ):
        with pytest.raises(UploadError):
            TranscriptAsk.of(bad)


def test_utterances_sentences_and_paragraphs_group_the_words():
    words = [
        Word("Hello,", 0.0, 0.4, 0.9, "S1"),
        Word("there.", 0.4, 0.8, 0.7, "S1"),
        Word("Hi!", 1.0, 1.2, 0.8, "S2"),
        Word("Bye.", 1.5, 1.9, 0.6, "S1"),
    ]
    finals = (
        Final(0, 0.0, 0.8, "Hello, there.", FinalReason.SILENCE, words[:2], "S1"),
        Final(1, 1.0, 1.9, "Hi! Bye.", FinalReason.SILENCE, words[2:], "S2"),
    )
    result = FileTranscript(2.0, finals, ("S1", "S2"), "en", DecodeReport(1, 2, 1.0, 0, 0), {})
    ask = TranscriptAsk.of({"audio_url": UPLOAD, "speaker_labels": True})
    got = completed(result, ask)
    assert [(u["speaker"], u["text"], u["start"], u["end"]) for u in got["utterances"]] == [
        ("A", "Hello, there.", 0, 800),
        ("B", "Hi!", 1000, 1200),
        ("A", "Bye.", 1500, 1900),
    ]
    assert got["words"][0] == {
        "text": "Hello,", "start": 0, "end": 400, "confidence": 0.9, "speaker": "A"
    }  # fmt: skip
    assert got["text"] == "Hello, there. Hi! Bye." and got["language_code"] == "en_us"
    assert [s["text"] for s in sentences(result, ask)] == ["Hello, there.", "Hi!", "Bye."]
    assert [(p["speaker"], p["text"]) for p in paragraphs(result, ask)] == [
        ("A", "Hello, there."),
        ("B", "Hi! Bye."),
    ]  # a paragraph is a final's speaker's: "Bye." is in S2's final


def test_channels_are_one_transcript_whose_speakers_name_their_channel():
    """Two channels' recordings as AssemblyAI's one multichannel transcript: in time
    order, segment ids unique, each word's speaker its channel, or with speaker_labels
    its channel and letter ("1A", "2B"); utterances are each channel's speaker's runs."""

    def heard(words: list[Word]) -> FileTranscript:
        finals = tuple(
            Final(i, w.start, w.end, w.word, FinalReason.SILENCE, [w], w.speaker)
            for i, w in enumerate(words)
        )
        return FileTranscript(3.0, finals, (), "en", DecodeReport(1, len(words), 1.0, 0, 0), {})

    left = heard([Word("Hello.", 0.0, 0.5, 0.9, "S1"), Word("Bye.", 2.0, 2.4, 0.8, "S2")])
    right = heard([Word("Hi.", 1.0, 1.3, 0.7, "S2")])
    for labels, speakers in ((False, ["1", "2", "1"]), (True, ["1A", "2B", "1B"])):
        ask = TranscriptAsk.of(
            {"audio_url": UPLOAD, "multichannel": True, "speaker_labels": labels}
        )
        merged = channel_labelled([left, right], labels)
        assert [f.segment_id for f in merged.finals] == [0, 1, 2]
        got = completed(merged, ask, channels=2)
        assert got["audio_channels"] == 2 and got["text"] == "Hello. Hi. Bye."
        assert [(w["speaker"], w["channel"]) for w in got["words"]] == list(
            zip(speakers, ["1", "2", "1"])
        )
        assert [(u["speaker"], u["channel"], u["text"]) for u in got["utterances"]] == [
            (s, c, t) for s, c, t in zip(speakers, "121", ["Hello.", "Hi.", "Bye."])
        ]
    plain = completed(left, TranscriptAsk.of({"audio_url": UPLOAD}))
    assert "audio_channels" not in plain and "channel" not in plain["words"][0]


def test_uploads_and_transcripts_are_dropped_when_they_age(tmp_path):
    """An upload unused for HELD_S is gone (its file too); a finished transcript is
    kept KEPT_S, then gone; an upload serves one transcript."""
    now = [0.0]
    jobs = AssemblyJobs(max_bytes=10_000, clock=lambda: now[0])
    received = tmp_path / "r.wav"
    received.write_bytes(b"x" * 100)
    stale = jobs.hold("k", received)
    now[0] = HELD_S + 1
    with pytest.raises(UploadError):
        jobs.add("k", TranscriptAsk.of({"audio_url": f"/v2/upload/{stale}"}))
    fresh = jobs.hold("k", received)
    ask = TranscriptAsk.of({"audio_url": f"/v2/upload/{fresh}"})
    with pytest.raises(UploadError):
        jobs.add("other", ask)
    job = jobs.add("k", ask)
    path = job.upload.path
    jobs.finish(job, None, "no")
    assert job.status == Status.ERROR and not path.exists()
    assert jobs.get("k", job.id) is job
    now[0] += KEPT_S + 1
    with pytest.raises(UploadError):
        jobs.get("k", job.id)
    with pytest.raises(UploadError):  # too big for the bytes held
        big = tmp_path / "big.wav"
        big.write_bytes(b"x" * 20_000)
        jobs.hold("k", big)


# every field a request reads: those its answers repeat, and the rest
FIELDS = [*ECHOED, "speaker_options", "word_boost", "custom_spelling"]
values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-5, 100)
    | st.floats()
    | st.text(max_size=8)
    | st.just(UPLOAD),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=6,
)


@given(st.dictionaries(st.sampled_from(FIELDS), values, max_size=6))
def test_any_request_body_is_a_request_or_a_400(body):
    """Whatever a transcript request holds, it is read or refused with 400, never an
    error of another kind (which would be a 500)."""
    try:
        TranscriptAsk.of(body)
    except UploadError as error:
        assert error.status == 400


def test_one_key_cannot_take_every_upload_or_push_out_anothers_transcripts(tmp_path, monkeypatch):
    """A key holds at most MAX_PER_KEY uploads waiting and keeps at most MAX_PER_KEY
    transcripts: past it its own oldest finished one goes (another key's stays), and
    with none finished it is refused."""
    from parley.transport import assemblyai_jobs

    monkeypatch.setattr(assemblyai_jobs, "MAX_PER_KEY", 2)
    jobs = AssemblyJobs(max_bytes=10_000)
    received = tmp_path / "r.wav"
    received.write_bytes(b"x" * 10)

    def ask(upload_id: str) -> TranscriptAsk:
        return TranscriptAsk.of({"audio_url": f"/v2/upload/{upload_id}"})

    others = jobs.add("b", ask(jobs.hold("b", received)))
    jobs.finish(others, None, "done")
    first = jobs.add("a", ask(jobs.hold("a", received)))
    second = jobs.add("a", ask(jobs.hold("a", received)))
    waiting = jobs.hold("a", received)
    with pytest.raises(UploadError, match="under way"):  # neither has finished
        jobs.add("a", ask(waiting))
    jobs.finish(first, None, "done")
    third = jobs.add("a", ask(waiting))  # the upload refused a job is still held
    assert {j.id for j in (second, third, others)} == {
        j.id for j in jobs._transcripts.values()
    }  # a's oldest finished went, b's stayed
    jobs.hold("a", received), jobs.hold("a", received)
    with pytest.raises(UploadError, match="of a key's"):
        jobs.hold("a", received)
    jobs.hold("b", received)


async def test_a_webhook_is_told_when_the_transcript_is_done(talk_wav):
    """webhook_url: {"transcript_id", "status"} POSTed, signed as Parley's webhooks, to
    an allowed target once the job ends; any other URL is refused with 400."""
    from conftest import serve_fake
    from test_webhooks import SECRET, Receiver

    receiver = Receiver()
    async with receiver as hooks:
        server = await serve_fake(webhooks={"allowed_targets": [hooks], "secret": SECRET})
        try:
            base = f"http://127.0.0.1:{server.port}"
            async with httpx.AsyncClient(base_url=base, timeout=60) as client:
                upload = await client.post("/v2/upload", content=talk_wav.read_bytes())
                asked = {"audio_url": upload.json()["upload_url"]}
                refused = await client.post(
                    "/v2/transcript", json={**asked, "webhook_url": "http://127.0.0.1:9/x"}
                )
                assert refused.status_code == 400 and "webhook" in refused.json()["error"]
                created = await client.post("/v2/transcript", json={**asked, "webhook_url": hooks})
                transcript_id = created.json()["id"]
                events = await receiver.delivered()
        finally:
            await server.stop()
    assert events == [{"transcript_id": transcript_id, "status": "completed"}]
