"""Keyterms, languages, translation and redaction on the real models and the real
wires: exact decoding under keyterm bias, languages detected per segment (base),
the English-only model's flag, Whisper's translation, and redaction reaching finals,
followers and webhooks; deepgram-sdk's ``keyterm``/``redact`` and the openai package's
``prompt`` and translations on a real tiny.en server."""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import replace

import numpy as np
import pytest
from websockets.asyncio.client import connect

from audio_fixtures import silence, speak, write_wav
from conftest import chunks_of, serve_real
from parley.core.asr import AsrRequest, Task
from parley.core.attempts import better_attempt, second_attempt, transcribe
from parley.core.keyterms import KeytermBias
from parley.core.quality import repeats_itself
from parley.core.vad import VadConfig
from parley.models.device import plan_device
from parley.models.encoder import token_bound
from parley.models.whisper_engine import WhisperEngine
from parley.protocol.messages import Final, StreamConfig, Word
from parley.sessions.session import Session
from parley.sessions.session_options import SessionOptions
from parley.weights.bundle import resolve_model
from parley.workers.decoding import StreamDecoding
from parley.workers.scheduler import AsrScheduler
from test_compat import deepgram_session
from test_webhooks import SECRET, Receiver

# A sentence tiny.en misspells without its keyterm and writes right with it (measured).
TERM_SENTENCE, TERM = "Please restart the Kubernetes cluster before noon.", "Kubernetes"
CARD = "My card number is 4 5 3 9, 1 4 8 8, 0 3 4 3, 6 4 6 7, and it expires soon."


@pytest.fixture(scope="module")
def base_engine(models_dir):
    return WhisperEngine(resolve_model("base", models_dir), "base", plan_device("cpu", "float32"))


def _request(engine, audio, config: StreamConfig, **fields) -> AsrRequest:
    return StreamDecoding.of(config, engine).request(
        audio, context=(), **{"draft": None, "with_words": False, **fields}
    )


# ---------------------------------------------------------------- the engines


def test_keyterm_bias_is_exact_under_drafts_and_batching(tiny_engine):
    """With keyterms, a decode that verifies drafts (a wrong hypothesis, or the right one),
    or shares its steps with other rows, keeps exactly the tokens that plain greedy
    decoding under the same bias chooses; and the bias changes what is written."""
    audio = speak(TERM_SENTENCE)
    plain = transcribe(tiny_engine, _request(tiny_engine, audio, StreamConfig()), budget=0)
    config = StreamConfig(keyterms=(TERM, "PostgreSQL", "Siobhan"))
    alone = transcribe(tiny_engine, _request(tiny_engine, audio, config), budget=0)
    assert TERM in alone.text and TERM not in plain.text
    for draft in (plain.tokens, alone.tokens, alone.tokens[:3] + plain.tokens[3:]):
        drafted = transcribe(tiny_engine, _request(tiny_engine, audio, config, draft=draft))
        assert drafted.tokens == alone.tokens
    others = [speak("The meeting starts at nine."), speak("Siobhan will present the numbers.")]
    decodes = tiny_engine.start([_request(tiny_engine, a, config) for a in [audio, *others]])
    while not all(d.finished for d in decodes):
        live = [d for d in decodes if not d.finished]
        tiny_engine.step(live, [tiny_engine.max_draft] * len(live))
    assert tiny_engine.finish(decodes[0]).tokens == alone.tokens
    for decode, clip in zip(decodes[1:], others):
        assert (
            tiny_engine.finish(decode).tokens
            == transcribe(tiny_engine, _request(tiny_engine, clip, config), budget=0).tokens
        )


def test_a_keyterm_the_model_hears_when_asked_is_written(tiny_engine):
    """In this voice tiny.en writes "Kubernetes" as "Qubanit", under the bias too, and
    too unlike the term to respell on its letters; asked once the decode is done, it
    finds the text with the term about as likely, so the final says "Kubernetes". The
    decode's tokens are the biased decode's own, and a sentence with no term in it has
    nothing heard."""
    config = StreamConfig(keyterms=(TERM, "PostgreSQL", "Siobhan"))
    decoding = StreamDecoding.of(config, tiny_engine)
    audio = speak(TERM_SENTENCE, "en-gb-x-rp")
    result = transcribe(tiny_engine, _request(tiny_engine, audio, config, with_words=True))
    assert TERM not in result.text
    assert [term for _, term in result.heard_keyterms] == [TERM]
    words = [Word(w.word, w.start, w.end, w.probability) for w in result.words]
    assert TERM not in " ".join(w.word for w in decoding.respelled(words))
    assert TERM in " ".join(w.word for w in decoding.respelled(words, result.heard_keyterms))
    unasked = transcribe(tiny_engine, _request(tiny_engine, audio, config), budget=0)
    assert unasked.tokens == result.tokens and unasked.heard_keyterms == ()
    plain = speak("The meeting starts at nine.")
    heard = transcribe(tiny_engine, _request(tiny_engine, plain, config, with_words=True))
    assert heard.words and heard.heard_keyterms == ()


def test_a_name_the_language_prior_fights_is_heard_with_it_in_the_prompt(tiny_engine):
    """tiny.en writes "Joaquin" as "Zokwinn": asked once, the text with the name is a
    little too unlikely (its spelling is rare), so it is asked again with the name in
    Whisper's prompt, where the model then finds it the likelier by far; the final says
    "Joaquin". Without that second look nothing would be heard."""
    config = StreamConfig(keyterms=("Joaquin", TERM, "Siobhan"))
    decoding = StreamDecoding.of(config, tiny_engine)
    audio = speak("Tell Joaquin the demo moved to Thursday.")
    request = _request(tiny_engine, audio, config, with_words=True)
    result = transcribe(tiny_engine, request)
    assert "Joaquin" not in result.text
    assert [term for _, term in result.heard_keyterms] == ["Joaquin"]
    words = [Word(w.word, w.start, w.end, w.probability) for w in result.words]
    assert "Joaquin" in " ".join(w.word for w in decoding.respelled(words, result.heard_keyterms))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("parley.models.keyterm_check.PROMPTED_MARGIN", float("inf"))
        assert transcribe(tiny_engine, request).heard_keyterms == ()


def test_a_fluent_term_is_not_heard_in_place_of_plain_words(base_engine):
    """base writes "Please send me the report" as "Please end me the report", and finds
    "Please Kubernetes report" about as likely a text; but the term's own tokens are
    improbable there, so nothing is heard and the final keeps the words said."""
    config = StreamConfig(keyterms=(TERM, "Dmitri", "PostgreSQL", "Siobhan"))
    audio = speak("Please send me the report before lunch.")
    result = transcribe(base_engine, _request(base_engine, audio, config, with_words=True))
    assert "report" in result.text and result.words and result.heard_keyterms == ()


def test_keyterms_that_derail_a_decode_into_a_loop_cost_nothing(tiny_engine):
    """Without the one-letter rule (the continuation's bonus right after " Z"), these
    three terms push tiny.en into a loop of its own (" Zendmar Alembic, Zendesk,
    D'Ambor, D'Ambor, …" until the decoder is full); the segment is decoded again without
    the bias and gives the plain decode's text, not an empty final. With the rule, the
    biased decode itself writes the sentence."""
    audio = speak("Xiomara leads the onboarding call on Monday.")
    plain_request = _request(tiny_engine, audio, StreamConfig())
    plain = transcribe(tiny_engine, plain_request)
    config = StreamConfig(keyterms=("Xiomara", "Zendesk", "Alembic"))
    request = _request(tiny_engine, audio, config)
    assert request.bias is not None and request.bias.weak_prefixes
    without_rule = replace(request, bias=KeytermBias(request.bias.sequences))
    (looping,) = tiny_engine.start([without_rule])
    while not looping.finished:
        tiny_engine.step([looping], [tiny_engine.max_draft])
    looped = tiny_engine.finish(looping)
    again = second_attempt(without_rule, looped)
    # The second attempt is the plain request (no bias, nothing else changed), whose
    # decode is ``plain``: what ``transcribe`` keeps of the two is the plain text.
    assert looped.rejected == "repetition" and again is not None and again.bias is None
    assert replace(again, audio=None) == replace(plain_request, audio=None)
    result = better_attempt(looped, plain)
    assert "onboarding" in plain.text
    assert (result.text, result.rejected) == (plain.text, None)
    with_rule = transcribe(tiny_engine, request)
    assert "onboarding" in with_rule.text and with_rule.rejected is None


def test_a_translation_that_loops_is_cut_short_and_decoded_again_without_its_loop(
    base_engine,
):
    """base translating espeak-ng's Spanish loops ("The Indian and the Indian and ...").
    The loop ends once it runs past what the clip could say, not when the decoder is full
    (444 tokens), and the clip is decoded again with no run of NO_REPEAT_TOKENS written
    twice: English text, not an empty final."""
    clip = speak("La reunión empieza mañana a las nueve en la sala grande.", "es")
    request = _request(base_engine, clip, StreamConfig(task=Task.TRANSLATE))
    (looping,) = base_engine.start([request])
    while not looping.finished:
        base_engine.step([looping], [base_engine.max_draft])
    looped = base_engine.finish(looping)
    assert looped.rejected == "repetition" and looped.text == ""
    assert len(looped.tokens) <= token_bound(request.seconds) + base_engine.max_draft + 1
    result = transcribe(base_engine, request)
    assert result.rejected is None and len(result.text.split()) >= 4
    assert not repeats_itself(result.text)


def test_languages_are_detected_per_segment_and_restricted_on_request(base_engine):
    """base tells Spanish from French from English, with a probability; restricted to
    en and fr it never says es; a forced language has no probability."""
    clips = {
        "es": speak("Por favor, envíame el informe antes del almuerzo del viernes.", "es"),
        "fr": speak("Nous devons terminer le projet avant la fin du mois.", "fr"),
        "en": speak("Please send me the report before lunch on Friday."),
    }
    for code, clip in clips.items():
        result = transcribe(base_engine, _request(base_engine, clip, StreamConfig()))
        assert result.language == code and 0.0 < result.language_probability <= 1.0
    restricted = transcribe(
        base_engine, _request(base_engine, clips["es"], StreamConfig(languages=("en", "fr")))
    )
    assert restricted.language in ("en", "fr")
    forced = transcribe(
        base_engine, _request(base_engine, clips["fr"], StreamConfig(language="fr"))
    )
    assert (forced.language, forced.language_probability) == ("fr", None)


def test_an_unsure_language_gets_a_second_look_in_the_runner_up(base_engine):
    """base hears this espeak-ng German as English at under 0.3, German the runner-up:
    decoded in both, the German text is the likelier and is kept, with German's own
    detection probability."""
    audio = speak("Gestern war es sehr kalt, deshalb sind wir zu Hause geblieben.", "de")
    request = _request(base_engine, audio, StreamConfig())
    (decode,) = base_engine.start([request])
    while not decode.finished:
        base_engine.step([decode], [base_engine.max_draft])
    one_look = base_engine.finish(decode)
    assert one_look.language == "en" and one_look.language_probability < 0.7
    assert one_look.runner_up is not None and one_look.runner_up[0] == "de"
    result = transcribe(base_engine, request)
    assert (result.language, result.language_probability) == ("de", one_look.runner_up[1])
    assert "kalt" in result.text


async def test_a_conversation_that_switches_language_labels_every_final(base_engine):
    """A stream in Spanish, English, then French (a pause between turns), through a real
    Session on base: each final carries the language of its own turn, with its
    probability (partials carry theirs as the fake engine's tests show: under load
    they may be shed, by design)."""
    from test_session import drive

    turns = [
        ("es", "Tenemos que terminar el proyecto antes de fin de mes."),
        ("en", "Please send me the report before lunch on Friday."),
        ("fr", "Il faisait très froid hier, alors nous sommes restés à la maison."),
    ]
    pause = np.zeros(16000, np.float32)
    audio = np.concatenate([x for code, said in turns for x in (speak(said, code), pause)])
    worker = AsrScheduler(base_engine, 8)
    await worker.start()
    try:
        session = Session(StreamConfig(partials=False), worker, SessionOptions(VadConfig()))
        messages = await drive(session, audio)
    finally:
        await worker.stop()
    finals = [m for m in messages if isinstance(m, Final) and m.text]
    assert [f.language for f in finals] == [code for code, _ in turns]
    assert all(f.language_probability is not None for f in finals)


async def test_a_recording_detects_among_the_languages_asked(base_engine):
    """A recording's windows are detected among ``languages`` when asked: the Spanish
    sentence base detects as es (the test above) is not es among en and fr."""
    from parley.recordings.files import FileJobs, FileLimits, FileRequest

    said = "Por favor, envíame el informe antes del almuerzo del viernes."
    audio = np.concatenate([silence(0.5), speak(said, "es"), silence(0.5)])
    worker = AsrScheduler(base_engine, 8)
    await worker.start(warm_up=False)
    try:
        jobs = FileJobs(worker, VadConfig(), FileLimits())
        with jobs.slot():
            result = await jobs.transcribe(audio, FileRequest(languages=("en", "fr-FR")))
    finally:
        await worker.stop()
    heard = {f.language for f in result.finals}
    assert heard and heard <= {"en", "fr"}, heard


CARD_IN_GROUPS = [
    "My card number is 4 5 3 9,",
    "1 4 8 8,",
    "0 3 4 3,",
    "6 4 6 7, and it expires soon.",
]


async def test_a_card_number_read_out_in_groups_is_redacted_in_every_final(tiny_engine):
    """The card read in four groups with pauses between them: a final each, none a card
    by itself; with redact=pci every one of them is redacted, judged as one number
    (protocol.md section 3a), through a real Session on tiny.en."""
    from test_session import drive

    audio = np.concatenate([x for group in CARD_IN_GROUPS for x in (speak(group), silence(0.4))])
    texts = {}
    for redact in ((), ("pci",)):
        worker = AsrScheduler(tiny_engine, 8)
        await worker.start()
        try:
            config = StreamConfig(partials=False, redact=redact)
            session = Session(config, worker, SessionOptions(VadConfig()))
            messages = await drive(session, audio)
        finally:
            await worker.stop()
        texts[redact] = [m.text for m in messages if isinstance(m, Final) and m.text]
    plain, redacted = texts[()], texts[("pci",)]
    assert len(plain) == len(redacted) >= 3
    assert all(re.search(r"\d", text) for text in plain)  # each final holds a group
    assert all("[redacted]" in text and not re.search(r"\d", text) for text in redacted)
    assert "soon" in redacted[-1]


def test_translation_writes_english(base_engine):
    """task=translate: Whisper's own translation of Spanish speech is English, and the
    final still names the spoken language."""
    clip = speak("Mi hermano trabaja en un pequeño hospital cerca de la estación.", "es")
    result = transcribe(base_engine, _request(base_engine, clip, StreamConfig(task=Task.TRANSLATE)))
    assert result.language == "es"
    assert {"brother", "hospital"} <= set(re.findall(r"[a-z]+", result.text.lower()))


def test_the_english_only_model_flags_other_languages(tiny_engine):
    """tiny.en writes French as fluent English; its final is flagged, English is not."""
    french = transcribe(
        tiny_engine,
        AsrRequest(speak("La réunion commence demain à neuf heures dans la grande salle.", "fr")),
    )
    english = transcribe(tiny_engine, AsrRequest(speak(TERM_SENTENCE)))
    assert french.text and french.foreign and french.language == "en"
    assert not english.foreign


# ---------------------------------------------------------------- the wires


@pytest.fixture(scope="module")
async def hooked_server(models_dir):
    """A real tiny.en server whose result webhooks go to a verifying receiver."""
    receiver = Receiver()
    async with receiver as url:
        server = await serve_real(models_dir, webhooks={"url": url, "secret": SECRET})
        yield server, receiver
        await server.stop()


async def test_redaction_reaches_finals_followers_and_webhooks(hooked_server):
    """A spoken card number with redact=pci&keyterms=…: the final says [redacted] with
    no digit and keeps the other words, timed; the follower and the webhook get the same
    final, and no digit of it anywhere."""
    server, receiver = hooked_server
    base = f"ws://127.0.0.1:{server.port}"
    audio = speak(CARD)
    async with connect(f"{base}/v1/stream?redact=pci&keyterms=Kubernetes") as ws:
        started = json.loads(await ws.recv())
        assert started["config"]["redact"] == ["pci"]
        async with connect(f"{base}/v1/sessions/{started['session_id']}/events") as follower:
            assert json.loads(await follower.recv())["type"] == "following"
            async for chunk in chunks_of(audio):
                await ws.send(chunk)
            await ws.send(json.dumps({"type": "end_of_stream"}))
            sent = [json.loads(m) async for m in ws]
            followed = [json.loads(m) async for m in follower]
    finals = [m for m in sent if m["type"] == "final"]
    text = " ".join(f["text"] for f in finals)
    assert "[redacted]" in text and not re.search(r"\d", text) and "expires" in text
    words = [w for f in finals for w in f["words"]]
    redacted = [w for w in words if w["word"].startswith("[redacted]")]
    assert len(redacted) == 1 and redacted[0]["end"] - redacted[0]["start"] > 1.0
    assert finals[0]["language"] == "en"
    assert [m for m in followed if m["type"] == "final"] == [
        {k: v for k, v in f.items() if k != "seq"} for f in finals
    ]
    for _ in range(100):
        if any(e["type"] == "session.ended" for e in receiver.events):
            break
        await asyncio.sleep(0.1)
    hooked = [e for e in receiver.events if e["type"] == "transcript.final"]
    assert hooked and all("[redacted]" in json.dumps(e) for e in hooked)
    # Nor the card in any delivery: every field but the session's id and the delivery's
    # time, whose hex and microseconds hold any four digits now and then.
    delivered = [json.loads(body) for body, _ in receiver.bodies]
    for event in delivered:
        event.pop("timestamp")
        event["data"].pop("session_id")
    for group in ("4539", "1488", "0343", "6467"):
        assert group not in json.dumps(delivered)


async def test_deepgram_keyterm_and_redact(hooked_server):
    """deepgram-sdk with keyterm, redact=pci and replace: the term is written (in a
    voice the model writes it otherwise in, because it hears it when asked), the card
    is not, the words found are replaced; search finds a word where it was said, and
    nowhere else; extra comes back in every result's metadata and the Metadata."""
    server, _ = hooked_server
    asked = {"keyterm": [TERM, "PostgreSQL", "Siobhan"]}
    replace = {"replace": ["restart:reboot", "before noon:by midday"]}
    for said, voice, query, want, unwanted in [
        (TERM_SENTENCE, "en-us", {"keyterm": TERM}, "kubernetes", None),
        (TERM_SENTENCE, "en-gb-x-rp", asked, "kubernetes", "qubanit"),
        (CARD, "en-us", {"redact": "pci"}, "[redacted]", r"\d"),
        (TERM_SENTENCE, "en-us", replace, "reboot", "noon"),
    ]:
        got = await deepgram_session(
            server.port, speak(said, voice), search="cluster", extra="call:42", **query
        )
        results = [m for m in got if m.type == "Results"]
        assert got[-1].type == "Metadata" and got[-1].model_extra["extra"] == {"call": "42"}
        assert all(m.metadata.model_extra["extra"] == {"call": "42"} for m in results)
        transcript = " ".join(m.channel.alternatives[0].transcript for m in results)
        assert want in transcript
        assert unwanted is None or not re.search(unwanted, transcript)
        searched = [m.channel.model_extra["search"] for m in results if m.is_final]
        assert all(s[0]["query"] == "cluster" for s in searched)
        hits = [hit for s in searched for hit in s[0]["hits"]]
        assert bool(hits and hits[0]["snippet"] == "cluster") == (said == TERM_SENTENCE)


async def test_openai_prompt_is_used_and_translations_refused_by_english_only(
    hooked_server, tmp_path
):
    """openai's realtime session takes a prompt (echoed; one over 1000 characters is
    refused as bad_config); audio.translations.create on the English-only model is a 400
    that says why; audio.transcriptions.create takes a prompt."""
    from openai import AsyncOpenAI, BadRequestError

    server, _ = hooked_server
    client = AsyncOpenAI(
        base_url=f"http://127.0.0.1:{server.port}/v1", api_key="unused", max_retries=0
    )
    async with client.realtime.connect(extra_query={"intent": "transcription"}) as rt:
        assert (await rt.recv()).type == "session.created"
        for prompt, answer in [
            ("Kubernetes and PostgreSQL.", "session.updated"),
            ("word " * 400, "error"),
        ]:
            await rt.send(
                {
                    "type": "session.update",
                    "session": {
                        "type": "transcription",
                        "audio": {"input": {"transcription": {"model": "x", "prompt": prompt}}},
                    },
                }
            )
            event = await rt.recv()
            assert event.type == answer
            if answer == "session.updated":
                assert event.session.audio.input.transcription.prompt == prompt
            else:
                assert event.error.code == "bad_config"
    path = tmp_path / "term.wav"
    write_wav(path, speak(TERM_SENTENCE))
    with pytest.raises(BadRequestError, match="English-only"):
        await client.audio.translations.create(model="whisper-1", file=path.open("rb"))
    for languages in ("en,es", "english!"):  # Parley's own field, as on the stream
        with pytest.raises(BadRequestError, match="languages|English-only"):
            await client.audio.transcriptions.create(
                model="whisper-1", file=path.open("rb"), extra_body={"languages": languages}
            )
    result = await client.audio.transcriptions.create(
        model="whisper-1", file=path.open("rb"), prompt="We run Kubernetes clusters."
    )
    assert TERM in result.text


FILLED = "I was, uh, going to call you, but, um, I forgot."


async def test_filler_words_are_written_when_asked_for(hooked_server, tmp_path):
    """deepgram-sdk's transcribe_file with filler_words=true writes the "um" and "uh"
    that Whisper leaves out by default (tiny.en, the same words otherwise); the openai
    package's transcriptions take it as an extra field."""
    from deepgram import DeepgramClient
    from openai import AsyncOpenAI

    from conftest import deepgram_environment

    server, _ = hooked_server
    base = f"http://127.0.0.1:{server.port}"
    path = write_wav(tmp_path / "filled.wav", speak(FILLED))
    client = DeepgramClient(api_key="unused", environment=deepgram_environment(base))

    async def words(**options) -> list[str]:
        response = await asyncio.to_thread(
            client.listen.v1.media.transcribe_file, request=path.read_bytes(), **options
        )
        return [w.word for w in response.results.channels[0].alternatives[0].words]

    plain, filled = await words(), await words(filler_words=True)
    fillers = {"um", "uh", "umm", "uhm", "er", "erm"}
    assert not fillers & set(plain) and len(fillers & set(filled)) == 2, (plain, filled)
    assert [w for w in filled if w not in fillers] == plain
    openai = AsyncOpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)
    text = await openai.audio.transcriptions.create(
        model="whisper-1",
        file=path.open("rb"),
        response_format="text",
        extra_body={"filler_words": "true"},
    )
    assert re.search(r"\b(um|uh)\b", text.lower()), text


async def test_recordings_take_keyterms_and_redaction_and_say_their_language(
    hooked_server, tmp_path
):
    """deepgram-sdk's transcribe_file with keyterm, redact=pci, numerals, replace and
    search: the term is written, the card redacted, the word replaced and another found
    where it was said, extra told back, the language reported as detected; openai's
    transcriptions take the same options as extra fields, and its verbose_json
    segments carry their language."""
    from deepgram import DeepgramClient
    from openai import AsyncOpenAI

    from conftest import deepgram_environment

    server, _ = hooked_server
    base = f"http://127.0.0.1:{server.port}"
    audio = np.concatenate([speak(TERM_SENTENCE), np.zeros(16000, np.float32), speak(CARD)])
    path = write_wav(tmp_path / "call.wav", audio)
    client = DeepgramClient(api_key="unused", environment=deepgram_environment(base))
    response = await asyncio.to_thread(
        client.listen.v1.media.transcribe_file,
        request=path.read_bytes(),
        keyterm=[TERM],
        redact="pci",
        numerals=True,
        replace=["restart:reboot"],
        search=["cluster", "epistemology"],
        extra=["call:42", "queue:billing"],
        punctuate=True,
        model="nova-3",
    )
    channel = response.results.channels[0]
    transcript = channel.alternatives[0].transcript
    assert TERM in transcript and "[redacted]" in transcript
    assert "reboot" in transcript and "restart" not in transcript
    assert response.metadata.model_extra["extra"] == {"call": "42", "queue": "billing"}
    found, nowhere = channel.search
    assert (found.query, nowhere.query, nowhere.hits) == ("cluster", "epistemology", [])
    (hit,) = found.hits
    assert hit.snippet == "cluster" and hit.confidence == 1.0 and 0 < hit.start < hit.end < 4
    assert not re.search(r"\d", transcript) and channel.detected_language == "en"
    openai = AsyncOpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)
    verbose = await openai.audio.transcriptions.create(
        model="whisper-1", file=path.open("rb"), response_format="verbose_json"
    )
    # Parley's own fields, as an OpenAI client sends them (extra_body)
    shaped = await openai.audio.transcriptions.create(
        model="whisper-1",
        file=path.open("rb"),
        response_format="text",
        extra_body={"redact": "pci", "replace": ["restart:reboot"], "keyterms": TERM},
    )
    assert "reboot" in shaped and "[redacted]" in shaped and not re.search(r"\d", shaped)
    assert TERM in shaped
    assert verbose.language == "english"
    assert verbose.segments and all(s.model_extra.get("language") == "en" for s in verbose.segments)
