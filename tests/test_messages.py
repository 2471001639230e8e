"""The wire contract's parsing and encoding (protocol.md, without sockets)."""

import json

import pytest

from parley.core.speaker_count import SpeakerCount
from parley.protocol.messages import (
    ControlType,
    Encoding,
    EndReason,
    Error,
    ErrorCode,
    Final,
    Finalized,
    FinalReason,
    Partial,
    ProtocolError,
    SegmentEnded,
    SessionEnded,
    SessionResumed,
    SessionStarted,
    SpeakerUpdate,
    SpeechStarted,
    StreamConfig,
    Word,
    control_fields,
    encode,
    parse,
)


def test_defaults_when_query_is_empty():
    """An empty query string means 16 kHz mono PCM16 with partials and no diarization."""
    config = StreamConfig.from_query({})
    assert config == StreamConfig(Encoding.PCM_S16LE, 16000, 1, None, True, False)


def test_query_values_are_parsed():
    """Every documented parameter is read and typed."""
    config = StreamConfig.from_query(
        {
            "encoding": "mulaw",
            "sample_rate": "8000",
            "channels": "2",
            "language": "EN",
            "partials": "false",
        }
    )
    assert (config.encoding, config.sample_rate, config.channels) == (Encoding.MULAW, 8000, 2)
    assert config.language == "en" and config.partials is False
    assert config.bytes_per_frame == 2


@pytest.mark.parametrize(
    "query, fragment",
    [
        ({"encoding": "opus"}, "encoding must be one of"),
        ({"sample_rate": "44.1k"}, "sample_rate must be an integer"),
        ({"sample_rate": "4000"}, "between 8000 and 48000"),
        ({"channels": "0"}, "channels must be between 1 and 8"),
        ({"partials": "maybe"}, "partials must be true or false"),
        ({"language": "english"}, "2 or 3 letter code"),
        ({"volume": "11"}, "unknown parameter(s): volume"),
        ({"num_speakers": "2"}, "num_speakers needs diarization=true"),
        ({"diarization": "true", "num_speakers": "two"}, "num_speakers must be an integer"),
        ({"diarization": "true", "max_speakers": "65"}, "between 1 and 64"),
        ({"diarization": "true", "min_speakers": "3", "max_speakers": "2"}, "at least min"),
    ],
)
def test_bad_config_is_refused_with_a_reason(query, fragment):
    """A bad query parameter is a bad_config error that names the problem."""
    with pytest.raises(ProtocolError) as caught:
        StreamConfig.from_query(query)
    assert caught.value.code is ErrorCode.BAD_CONFIG
    assert fragment in caught.value.message


def test_query_round_trip():
    """A config written as a query string reads back the same."""
    config = StreamConfig(Encoding.PCM_F32LE, 48000, 2, "de", False, False)
    assert StreamConfig.from_query(config.to_query()) == config


def test_a_speaker_count_is_read_and_round_trips():
    """num/min/max_speakers (with diarization) give the stream's SpeakerCount, and come back
    the same through the query string and session_started's JSON."""
    config = StreamConfig.from_query(
        {"diarization": "true", "min_speakers": "2", "max_speakers": "4"}
    )
    assert config.speaker_count == SpeakerCount(None, 2, 4)
    assert StreamConfig.from_query(config.to_query()) == config
    assert StreamConfig.from_json(config.to_json()) == config
    assert StreamConfig.from_query({}).speaker_count == SpeakerCount()


@pytest.mark.parametrize(
    "text",
    ['{"type": "keep_alive"}', '{"type": "finalize"}', '{"type": "end_of_stream", "extra": 1}'],
)
def test_control_messages_parse(text):
    """The three control messages are recognised (extra fields are ignored)."""
    assert ControlType(control_fields(text)["type"]) is ControlType(json.loads(text)["type"])


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("not json", "must be JSON objects"),
        ("[1, 2]", 'a string "type"'),
        ('{"type": 3}', 'a string "type"'),
        ('{"type": "configure"}', "unknown message type 'configure'"),
    ],
)
def test_bad_control_messages_are_bad_message(text, fragment):
    """Malformed or unknown text messages are bad_message errors."""
    with pytest.raises(ProtocolError) as caught:
        control_fields(text)
    assert caught.value.code is ErrorCode.BAD_MESSAGE and fragment in caught.value.message


def test_final_encodes_as_documented():
    """A final carries its times, text, words, speaker, reason and language, times
    rounded to ms."""
    final = Final(
        3,
        1.23456,
        2.5,
        "hi there",
        FinalReason.SILENCE,
        [Word("hi", 1.3, 1.5, 0.9), Word("there", 1.5, 2.0, 0.8)],
        language="en",
        language_probability=0.97,
        confidence=0.81,
    )
    data = json.loads(encode(final))
    assert data == {
        "type": "final",
        "segment_id": 3,
        "start": 1.235,
        "end": 2.5,
        "text": "hi there",
        "reason": "silence",
        "speaker": None,
        "language": "en",
        "language_probability": 0.97,
        "confidence": 0.81,
        "warnings": [],
        "words": [
            {"word": "hi", "start": 1.3, "end": 1.5, "probability": 0.9, "speaker": None},
            {"word": "there", "start": 1.5, "end": 2.0, "probability": 0.8, "speaker": None},
        ],
    }


def test_errors_say_whether_they_are_fatal():
    """Errors with a close code are fatal; the others are not."""
    assert json.loads(encode(Error(ErrorCode.BAD_AUDIO, "x")))["fatal"] is False
    data = json.loads(encode(Error(ErrorCode.UNAUTHORIZED, "no")))
    assert data == {"type": "error", "code": "unauthorized", "message": "no", "fatal": True}
    assert ErrorCode.UNAUTHORIZED.close_code == 4401


def test_session_started_carries_config_and_limits():
    """session_started echoes the effective config, the limits and the protocol version."""
    data = json.loads(encode(SessionStarted("abc", StreamConfig(), {"max_frame_bytes": 9}, "m")))
    assert data["protocol"] == 1 and data["config"]["encoding"] == "pcm_s16le"
    assert data["limits"] == {"max_frame_bytes": 9} and data["model"] == "m"


WORDS = [Word("hi", 1.3, 1.5, 0.9, "S1"), Word("there", 1.5, 2.0, 0.8, "S2")]
EVERY_SERVER_MESSAGE = [
    SessionStarted("abc", StreamConfig(diarization=True), {"max_frame_bytes": 9}, "m", "n/1", "t"),
    SessionResumed("abc", 3200, 7),
    SpeechStarted(0, 0.25),
    SegmentEnded(0, 2.0, FinalReason.SPEAKER_CHANGE),
    Partial(0, 0.25, 1.0, "hi", "S1", "en"),
    Final(0, 1.25, 2.0, "hi there", FinalReason.SILENCE, WORDS, "S1", "en", 0.9, 0.8, ["x"]),
    SpeakerUpdate(0, "S2", WORDS),
    Finalized(2.0),
    SessionEnded(2.5, 1, EndReason.MAX_DURATION),
    Error(ErrorCode.TRANSCRIPTION_FAILED, "no", segment_id=0),
]


@pytest.mark.parametrize("message", EVERY_SERVER_MESSAGE, ids=lambda m: m.type)
def test_every_server_message_reads_back_as_it_was_sent(message):
    """What the server encodes, the client's parse gives back: the same typed message."""
    assert parse(json.loads(encode(message, seq=5))) == message


@pytest.mark.parametrize("message", EVERY_SERVER_MESSAGE, ids=lambda m: m.type)
def test_fields_a_newer_server_adds_are_ignored(message):
    """Section 8: within v1 the server may add fields, in messages and in words; a client
    reads what it knows and leaves the rest."""
    data = json.loads(encode(message))
    data["added_later"] = {"any": 1}
    for word in data.get("words", []):
        word["emphasis"] = 0.5
    assert parse(data) == message


def test_a_message_type_a_newer_server_adds_is_left_out():
    assert parse({"type": "summary", "text": "x"}) is None
