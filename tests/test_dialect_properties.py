"""Property tests of the compatible wires: whatever a client sends on /v1/listen,
/v1/realtime, /v1/twilio or /v1/meeting, the server answers with documented errors,
keeps the session going and ends it with a documented close code, never with
internal_error. Real sockets to a real server (fake engine) that runs on its own thread
for the whole module."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from parley.transport.predict_parameters import PREDICT_PARAMETERS

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
base64_audio = st.binary(max_size=640).map(lambda b: base64.b64encode(b).decode())

# Per wire: the path, the event names it knows, the field that names them, how to end.
WIRES = {
    "deepgram": (
        "/v1/listen?encoding=linear16&sample_rate=16000&interim_results=true"
        "&utterance_end_ms=1000&vad_events=true",
        ["KeepAlive", "Finalize", "Configure"],
        "type",
        json.dumps({"type": "CloseStream"}),
    ),
    "flux": (
        "/v2/listen?model=flux-general-en&encoding=linear16&sample_rate=16000"
        "&eager_eot_threshold=0.5",
        ["CloseStream", "ForceEndTurn", "Configure", "KeepAlive"],
        "type",
        json.dumps({"type": "CloseStream"}),
    ),
    "assemblyai": (
        "/v3/ws?sample_rate=16000&format_turns=true",
        ["Terminate", "ForceEndpoint", "UpdateConfiguration", "KeepAlive"],
        "type",
        json.dumps({"type": "Terminate"}),
    ),
    "openai": (
        "/v1/realtime?intent=transcription",
        [
            "input_audio_buffer.append",
            "input_audio_buffer.commit",
            "input_audio_buffer.clear",
            "session.update",
            "transcription_session.update",
            "response.create",
        ],
        "type",
        None,
    ),
    "twilio": (
        "/v1/twilio",
        ["connected", "start", "media", "mark", "dtmf", "stop"],
        "event",
        json.dumps({"event": "stop"}),
    ),
    "meeting": (
        "/v1/meeting",
        [
            "audio",
            "participant_left",
            "finalize",
            "keep_alive",
            "audio_separate_raw.data",
            "participant_events.leave",
        ],
        "type",
        json.dumps({"type": "end_of_stream"}),
    ),
    # WhisperLive's: options named by "uid", then float32 audio, then END_OF_AUDIO
    "whisperlive": ("/", ["u-1"], "uid", "END_OF_AUDIO"),
}
DOCUMENTED_CLOSES = {1000, 1009, 4400}


@pytest.fixture(scope="module")
def port(threaded_fake_port):
    return threaded_fake_port


any_or_audio = json_values | base64_audio
# Events with the wire's own nesting, their leaves anything: what a confused client sends.
SHAPED = {
    "openai": st.builds(
        lambda kind, fmt, tr, td: json.dumps(
            {
                "type": kind,
                "session": {
                    "type": "transcription",
                    "input_audio_format": fmt,
                    "input_audio_transcription": tr,
                    "turn_detection": td,
                    "audio": {"input": {"format": fmt, "transcription": tr, "turn_detection": td}},
                },
            }
        ),
        st.sampled_from(["session.update", "transcription_session.update"]),
        json_values
        | st.fixed_dictionaries(
            {
                "type": st.sampled_from(["audio/pcm", "audio/pcmu", "audio/pcma"]),
                "rate": json_values,
            }
        ),
        json_values,
        json_values,
    ),
    "flux": st.builds(
        lambda thresholds, keyterms: json.dumps(
            {"type": "Configure", "thresholds": thresholds, "keyterms": keyterms}
        ),
        json_values
        | st.dictionaries(
            st.sampled_from(["eot_threshold", "eager_eot_threshold", "eot_timeout_ms"]),
            json_values,
        ),
        json_values | st.lists(st.text(max_size=60), max_size=4),
    ),
    "twilio": st.builds(
        lambda fmt, params, tracks, track, payload, at: [
            json.dumps(
                {
                    "event": "start",
                    "start": {"mediaFormat": fmt, "customParameters": params, "tracks": tracks},
                }
            ),
            json.dumps(
                {"event": "media", "media": {"track": track, "payload": payload, "timestamp": at}}
            ),
        ],
        json_values,
        json_values,
        json_values,
        st.sampled_from(["inbound", "outbound"]) | json_values,
        any_or_audio,
        json_values | st.integers(0, 10**7).map(str),
    ),
    "whisperlive": st.builds(
        lambda options, audio: [json.dumps({"uid": "u-1", **options}), audio],
        st.dictionaries(
            st.sampled_from(
                ["language", "task", "audio_format", "initial_prompt", "hotwords"]
                + ["send_last_n_segments", "word_timestamps", "enable_diarization"]
            ),
            json_values,
        ),
        st.binary(max_size=64) | st.sampled_from([b"\x00\x00\x80\x3f" * 800, b"END_OF_AUDIO"]),
    ),
    "meeting": st.builds(
        lambda who, audio, at, recall: json.dumps(
            {
                "event": "audio_separate_raw.data",
                "data": {
                    "data": {"buffer": audio, "timestamp": {"relative": at}, "participant": who}
                },
            }
            if recall
            else {"type": "audio", "participant": who, "audio": audio, "timestamp": at}
        ),
        json_values | st.fixed_dictionaries({"id": json_values, "name": json_values}),
        any_or_audio,
        json_values,
        st.booleans(),
    ),
}


def flatten(messages: list) -> list:
    return [m for item in messages for m in (item if isinstance(item, list) else [item])]


def events(names: list[str], field: str):
    """Messages shaped like the wire's events: a known or unknown name, fields of any
    JSON, sometimes well-formed audio where the wire carries it."""
    fields = st.dictionaries(
        st.sampled_from(
            ["audio", "media", "session", "start", "data", "participant", "timestamp", "dtmf", "x"]
        ),
        json_values | base64_audio,
        max_size=4,
    )
    named = st.builds(
        lambda name, rest: json.dumps({**rest, field: name}),
        st.sampled_from(names) | st.text(max_size=12),
        fields,
    )
    return named | json_values.map(json.dumps) | st.text(max_size=40) | st.binary(max_size=64)


@pytest.mark.parametrize("wire", list(WIRES))
def test_any_messages_get_documented_answers(port, wire):
    path, names, field, end = WIRES[wire]

    @settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(events(names, field) | SHAPED.get(wire, st.nothing()), max_size=6).map(flatten))
    def check(messages):
        try:
            ws = connect(f"ws://127.0.0.1:{port}{path}", open_timeout=10, close_timeout=10)
        except InvalidStatus as refused:  # only a refusal the wire documents
            assert refused.response.status_code in (400, 403)
            return
        with ws:
            for message in messages:
                try:
                    ws.send(message)
                except ConnectionClosed:
                    break
            try:
                if end is not None:
                    ws.send(end)
                else:
                    ws.close()
            except ConnectionClosed:
                pass
            answers = []
            try:
                while True:
                    answers.append(ws.recv(timeout=20))
            except ConnectionClosed:
                pass
        for answer in answers:
            assert "internal_error" not in str(answer), answer
        assert ws.close_code in DOCUMENTED_CLOSES | ({1005, None} if end is None else set())

    check()


@settings(max_examples=200)
@given(
    st.dictionaries(
        st.sampled_from(
            [
                "encoding",
                "sample_rate",
                "channels",
                "language",
                "interim_results",
                "diarize",
                "endpointing",
                "utterance_end_ms",
                "vad_events",
                "punctuate",
                "multichannel",
                "callback",
                "intent",
                "webhook_url",
                "model",
                "eot_threshold",
                "eager_eot_threshold",
                "eot_timeout_ms",
                "language_hint",
                "format_turns",
                "speaker_labels",
                "keyterms_prompt",
                "min_turn_silence",
                "end_of_turn_confidence_threshold",
                "max_turn_silence",
                "speech_model",
                "diarization",
                "partials",
                "x",
            ]
        ),
        st.text(max_size=8)
        | st.sampled_from(
            [
                "linear16",
                "mulaw",
                "alaw",
                "16000",
                "8000",
                "true",
                "false",
                "transcription",
                "en-US",
                "multi",
                "flux-general-multi",
                "pcm_s16le",
                "pcm_mulaw",
                '["Okonkwo"]',
                "universal-streaming-multilingual",
                "0.8",
                "0",
                "-5",
                "1000",
                "¹",  # a digit to str.isdigit that int() refuses
            ]
        ),
    )
)
@example({"sample_rate": "16000", "min_turn_silence": "¹"})  # int() refuses what isdigit takes
def test_any_handshake_query_is_a_setup_or_bad_config(params):
    """Every dialect answers any query with its settings or a bad_config ProtocolError."""
    from websockets.datastructures import Headers

    from parley.core.vad import VadConfig
    from parley.protocol.messages import ErrorCode, ProtocolError
    from parley.transport.assemblyai import AssemblyAIDialect
    from parley.transport.deepgram import DeepgramDialect
    from parley.transport.flux import FluxDialect
    from parley.transport.meeting import MeetingDialect
    from parley.transport.native import NativeDialect
    from parley.transport.openai_realtime import OpenAIRealtimeDialect
    from parley.transport.twilio import TwilioDialect

    for dialect in (
        NativeDialect(),
        DeepgramDialect(VadConfig()),
        FluxDialect(),
        AssemblyAIDialect(VadConfig()),
        OpenAIRealtimeDialect(VadConfig()),
        TwilioDialect(None),
        MeetingDialect(),
    ):
        try:
            setup = dialect.setup(params, Headers())
        except ProtocolError as exc:
            assert exc.code is ErrorCode.BAD_CONFIG and exc.message
        else:
            assert setup.vad is None or setup.vad.min_silence_ms >= setup.vad.speech_pad_ms


PREDICT_KEYS = [*PREDICT_PARAMETERS, "x"]
LISTEN_KEYS = [
    "encoding",
    "sample_rate",
    "channels",
    "multichannel",
    "language",
    "detect_language",
    "diarize",
    "utterances",
    "utt_split",
    "paragraphs",
    "keyterm",
    "keywords",
    "redact",
    "replace",
    "search",
    "numerals",
    "profanity_filter",
    "dictation",
    "extra",
    "callback",
]
OPENAI_KEYS = [
    "response_format",
    "language",
    "prompt",
    "timestamp_granularities[]",
    "stream",
    "diarize",
    "keyterms",
    "redact",
    "replace",
    "profanity_filter",
    "dictation",
    "known_speaker_names[]",
    "known_speaker_references[]",
    "languages",
    "max_line_width",
    "max_line_count",
]
field_text = st.text(max_size=12) | st.sampled_from(
    ["nan", "inf", "-1", "0", "1e400", "true", "json", "srt", "word", "pci", "a:b", "multi", "¹"]
)


@pytest.fixture(scope="module")
def short_wav():
    import io
    import wave

    import numpy as np

    tone = (np.sin(np.arange(8000) / 16000 * 2 * np.pi * 300) * 3000).astype("<i2")
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(16000)
        out.writeframes(tone.tobytes())
    return buffer.getvalue()


def test_any_recording_fields_get_a_result_or_a_documented_error(port, short_wav):
    """Whatever the reference handler's parameters (any JSON), Deepgram's query or
    OpenAI's form fields, a recording is answered 200 or a 4xx in the API's own error
    shape, never a 500."""
    import requests

    base = f"http://127.0.0.1:{port}"

    def documented(response, code_of) -> None:
        assert response.status_code == 200 or 400 <= response.status_code < 500, response.text
        if response.status_code != 200:
            assert code_of(response.json()), response.text

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        st.dictionaries(st.sampled_from(PREDICT_KEYS), json_values | field_text),
        st.dictionaries(st.sampled_from(LISTEN_KEYS), field_text),
        st.dictionaries(st.sampled_from(OPENAI_KEYS), field_text),
    )
    def check(parameters, query, form) -> None:
        predict = requests.post(
            f"{base}/predict",
            files={"file": ("a.wav", short_wav)},
            data={"parameters": json.dumps(parameters)},
            timeout=30,
        )
        documented(predict, lambda body: body["error"])
        listen = requests.post(f"{base}/v1/listen", params=query, data=short_wav, timeout=30)
        documented(listen, lambda body: body["err_code"])
        openai = requests.post(
            f"{base}/v1/audio/transcriptions",
            files={"file": ("a.wav", short_wav)},
            data=form,
            timeout=30,
        )
        documented(openai, lambda body: body["error"]["code"])

    check()


def test_any_token_request_gets_a_token_or_a_documented_error(port):
    """Whatever body or query the four token requests get (section 17), the answer is a
    token or a 400 in the API's own error shape, never a 500."""
    import requests

    base = f"http://127.0.0.1:{port}"
    lifetimes = json_values | st.integers(-10, 10_000) | st.floats(allow_nan=False)

    # a client secret's session: anything, or a transcription session's own fields
    # holding anything
    session_input = st.fixed_dictionaries(
        {},
        optional={
            "format": json_values | st.fixed_dictionaries({"type": field_text}),
            "transcription": json_values,
            "turn_detection": json_values,
        },
    )
    sessions = json_values | st.builds(
        lambda audio_in: {"type": "transcription", "audio": {"input": audio_in}},
        session_input | json_values,
    )

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        lifetimes,
        sessions,
        field_text,
        json_values | st.dictionaries(st.text(max_size=8), lifetimes),
    )
    def check(ttl, session, expires, after) -> None:
        for path, body, token_of, error_of in (
            ("/v1/auth/token", {"ttl_s": ttl}, "token", lambda b: b["error"]),
            ("/v1/auth/grant", {"ttl_seconds": ttl}, "access_token", lambda b: b["err_code"]),
            (
                "/v1/realtime/client_secrets",
                {"expires_after": after, "session": session},
                "value",
                lambda b: b["error"]["code"],
            ),
        ):
            answer = requests.post(f"{base}{path}", data=json.dumps(body), timeout=10)
            assert answer.status_code in (200, 400), (path, body, answer.text)
            assert answer.json()[token_of] if answer.ok else error_of(answer.json())
        aai = requests.get(f"{base}/v3/token", params={"expires_in_seconds": expires}, timeout=10)
        assert aai.status_code in (200, 400), aai.text
        assert aai.json()["token"] if aai.ok else aai.json()["error"]

    check()


AAI_KEYS = [
    "speaker_labels",
    "speakers_expected",
    "speaker_options",
    "language_code",
    "language_detection",
    "language_detection_options",
    "punctuate",
    "format_text",
    "keyterms_prompt",
    "word_boost",
    "prompt",
    "custom_spelling",
    "disfluencies",
    "filter_profanity",
    "redact_pii",
    "redact_pii_policies",
    "webhook_url",
    "multichannel",
    "dual_channel",
    "audio_start_from",
    "audio_end_at",
]
AAI_PARTS = ["srt", "vtt", "sentences", "paragraphs", "word-search", "x"]


def test_any_assemblyai_transcript_request_gets_a_transcript_or_a_documented_error(port, short_wav):
    """Whatever AssemblyAI's transcript request holds (any JSON in its fields), and
    whatever the listing's and the parts' queries say: 200 or a 4xx with AssemblyAI's
    ``error``, never a 500; a job created ends completed (or, asked for a part past the
    recording's end, with that error)."""
    import requests

    base = f"http://127.0.0.1:{port}"
    unused: list[str] = []  # an upload a refused request left for the next example

    @settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        st.dictionaries(st.sampled_from(AAI_KEYS), json_values | field_text),
        st.dictionaries(st.sampled_from(["limit", "status", "before_id"]), field_text),
        st.sampled_from(AAI_PARTS),
        st.dictionaries(st.sampled_from(["chars_per_caption", "words"]), field_text),
    )
    @example({}, {"limit": "¹"}, "srt", {"chars_per_caption": "¹"})
    def check(fields, listing, part, part_query) -> None:
        if not unused:
            upload = requests.post(f"{base}/v2/upload", data=short_wav, timeout=10)
            unused.append(upload.json()["upload_url"])
        body = {**fields, "audio_url": unused[-1]}
        # json.dumps writes inf as Infinity, which is no JSON: a 400 as well
        created = requests.post(f"{base}/v2/transcript", data=json.dumps(body), timeout=10)
        assert created.status_code in (200, 400), created.text
        if created.ok:
            unused.pop()
            job = created.json()
            while job["status"] in ("queued", "processing"):
                job = requests.get(f"{base}/v2/transcript/{job['id']}", timeout=10).json()
            # a part asked for past the recording's end is the one documented error
            assert job["status"] == "completed" or "past the recording" in job["error"], job
            got = requests.get(
                f"{base}/v2/transcript/{job['id']}/{part}", params=part_query, timeout=10
            )
            assert got.status_code in (200, 400, 404), got.text
            if not got.ok:
                assert got.json()["error"]
            requests.delete(f"{base}/v2/transcript/{job['id']}", timeout=10)
        else:
            assert created.json()["error"]
        listed = requests.get(f"{base}/v2/transcript", params=listing, timeout=10)
        assert listed.status_code in (200, 400), listed.text

    check()
