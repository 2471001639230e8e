"""Home Assistant's Wyoming protocol on its own TCP port (protocol.md section 10c),
through the ``wyoming`` package's own client (``AsyncTcpClient``, as Home Assistant's
Wyoming integration connects): ``describe`` and ``info``; a voice command's events in,
its transcript streamed out; and every refusal, as an ``error`` event before the close.
Decoded by the fake engine; the real model's transcript is test_compat_sdks'."""

import asyncio
import json
import os

import pytest
from websockets.asyncio.client import connect
from wyoming.asr import Transcribe, Transcript
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.error import Error as WyomingError
from wyoming.event import Event, async_read_event
from wyoming.info import Describe, Info
from wyoming.ping import Ping, Pong

from audio_fixtures import speak, wer
from conftest import pcm16
from parley.config import Settings
from parley.transport.wyoming_listener import session_query
from test_vocabulary import TERM, TERM_SENTENCE

RATE, WIDTH, CHANNELS = 16000, 2, 1


async def wyoming_server(start, **sections):
    """A fake-engine server with its Wyoming port on (any free one)."""
    wyoming = {"port": 0, **sections.pop("wyoming", {})}
    _, server = await start(wyoming=wyoming, **sections)
    return server


async def command(port: int, audio, *before: Event, chunk_s: float = 0.1) -> list[Event]:
    """Send ``before`` (transcribe, audio-start, ...), then ``audio`` as 16-bit chunks and
    audio-stop, as Home Assistant does; every event the server sent, up to its close."""
    async with AsyncTcpClient("127.0.0.1", port) as client:
        for event in before:
            await client.write_event(event)
        data, step = pcm16(audio), int(RATE * chunk_s) * WIDTH
        for i in range(0, len(data), step):
            chunk = AudioChunk(rate=RATE, width=WIDTH, channels=CHANNELS, audio=data[i : i + step])
            await client.write_event(chunk.event())
        await client.write_event(AudioStop().event())
        return await read_all(client)


async def read_all(client: AsyncTcpClient) -> list[Event]:
    events = []
    while (event := await asyncio.wait_for(client.read_event(), 30)) is not None:
        events.append(event)
    return events


async def native_text(port: int, audio) -> str:
    """The text of the finals /v1/stream gives for ``audio``, joined with spaces."""
    texts = []
    async with connect(f"ws://127.0.0.1:{port}/v1/stream?partials=false") as native:
        await native.recv()  # session_started
        data = pcm16(audio)
        for i in range(0, len(data), 3200):
            await native.send(data[i : i + 3200])
        await native.send(json.dumps({"type": "end_of_stream"}))
        async for message in native:
            final = json.loads(message)
            if final["type"] == "final" and final["text"]:
                texts.append(final["text"])
    return " ".join(texts)


def of_type(events: list[Event], kind: str) -> list[Event]:
    return [e for e in events if e.type == kind]


async def test_describe_tells_the_model_its_languages_and_streaming(start):
    """Home Assistant asks ``describe`` on a connection of its own, to list the service:
    one ASR program that streams transcripts, with the server's model and languages."""
    server = await wyoming_server(start)
    async with AsyncTcpClient("127.0.0.1", server.wyoming_port) as client:
        await client.write_event(Describe().event())
        info = Info.from_event(await client.read_event())
        await client.write_event(Ping(text="x").event())
        assert Pong.from_event(await client.read_event()).text == "x"
    (program,) = info.asr
    assert program.supports_transcript_streaming and program.installed
    (model,) = program.models
    assert model.name == "fake" and model.languages == ["en"]
    assert server.endpoint.live_sessions == 0  # describing opens no session


async def test_a_voice_command_streams_each_final_then_the_whole_transcript(start, talk):
    """transcribe, audio-start, chunks, audio-stop: transcript-start, a transcript-chunk
    for each final (its text, spaced after the first), the whole transcript, then
    transcript-stop; the finals are those /v1/stream gives for the same audio."""
    audio, _ = talk
    server = await wyoming_server(start)
    events = await command(
        server.wyoming_port,
        audio,
        Transcribe(language="en-US").event(),
        AudioStart(rate=RATE, width=WIDTH, channels=CHANNELS).event(),
    )
    kinds = [e.type for e in events]
    assert kinds[0] == "transcript-start" and kinds[-2:] == ["transcript", "transcript-stop"]
    chunks = [e.data["text"] for e in of_type(events, "transcript-chunk")]
    assert len(chunks) == 3 and chunks[1].startswith(" ")
    whole = Transcript.from_event(of_type(events, "transcript")[0])
    assert whole.text == "".join(chunks) and whole.language == "en"
    assert whole.text == await native_text(server.port, audio)
    assert events[0].data == {"language": "en"}


async def test_audio_without_audio_start_or_transcribe_is_transcribed(start, talk):
    """Some clients send chunks with no audio-start (and no transcribe): the first
    chunk's format opens the stream, and it is not lost."""
    audio, _ = talk
    server = await wyoming_server(start)
    events = await command(server.wyoming_port, audio)
    whole = Transcript.from_event(of_type(events, "transcript")[0])
    assert whole.text == await native_text(server.port, audio)


async def test_a_stop_with_no_audio_gets_an_empty_transcript(start):
    server = await wyoming_server(start)
    async with AsyncTcpClient("127.0.0.1", server.wyoming_port) as client:
        await client.write_event(Transcribe().event())
        await client.write_event(AudioStop().event())
        events = await read_all(client)
    assert [(e.type, e.data) for e in events] == [("transcript", {"text": ""})]


@pytest.mark.parametrize(
    "before, code",
    [
        ([Transcribe(language="de").event()], "bad_config"),  # the fake model is English-only
        ([AudioStart(rate=RATE, width=4, channels=1).event()], "bad_config"),
        ([AudioStart(rate=4000, width=2, channels=1).event()], "bad_config"),
        ([Event("audio-start", {"rate": "16000", "width": 2, "channels": 1})], "bad_message"),
    ],
)
async def test_settings_it_cannot_serve_are_an_error_event_then_the_close(start, before, code):
    server = await wyoming_server(start)
    async with AsyncTcpClient("127.0.0.1", server.wyoming_port) as client:
        for event in before:
            await client.write_event(event)
        await client.write_event(AudioStart(rate=RATE, width=WIDTH, channels=CHANNELS).event())
        events = await read_all(client)
    (error,) = events
    assert WyomingError.from_event(error).code == code and error.data["text"]


async def raw_exchange(port: int, sent: bytes) -> list[Event]:
    """Write ``sent`` as they are; every event the server wrote before closing."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(sent)
    await writer.drain()
    events = []
    while (event := await asyncio.wait_for(async_read_event(reader), 30)) is not None:
        events.append(event)
    writer.close()
    return events


@pytest.mark.parametrize(
    "sent, code",
    [
        (b"not json\n", "bad_message"),
        (b'{"data": {}}\n', "bad_message"),
        (b'{"type": "audio-chunk", "payload_length": 9999999}\n', "frame_too_large"),
        (b'{"type": "x", "data_length": -1}\n', "bad_message"),
        (b"{" + b" " * 70000, "frame_too_large"),  # a header line past 64 KiB
    ],
)
async def test_what_is_no_wyoming_event_is_refused_before_any_session(start, sent, code):
    """A header that is no JSON object with a string type, or declares more than the
    bounds (a payload past max_frame_bytes, a header line past 64 KiB): an error event,
    then the close, and no byte of it held beyond the bounds."""
    server = await wyoming_server(start)
    events = await raw_exchange(server.wyoming_port, sent)
    assert [(e.type, e.data["code"]) for e in events] == [("error", code)]
    assert server.metrics.errors.labels(code)._value.get() == 1


async def test_a_broken_event_mid_stream_ends_the_session_with_its_error(start, talk):
    """After the session opened, a payload past max_frame_bytes is fatal: an error event
    (frame_too_large), then the close."""
    audio, _ = talk
    server = await wyoming_server(start, server={"max_frame_bytes": 4096})
    start_event = b'{"type": "audio-start", "data": {"rate": 16000, "width": 2, "channels": 1}}\n'
    chunk = pcm16(audio[:1600])
    good = json.dumps(
        {"type": "audio-chunk", "data": {"rate": RATE, "width": 2, "channels": 1}}
    ).encode()
    good = good[:-1] + f', "payload_length": {len(chunk)}}}\n'.encode() + chunk
    too_big = b'{"type": "audio-chunk", "payload_length": 5000}\n'
    events = await raw_exchange(server.wyoming_port, start_event + good + too_big)
    assert (events[-1].type, events[-1].data["code"]) == ("error", "frame_too_large")
    assert server.metrics.errors.labels("frame_too_large")._value.get() == 1


async def test_a_chunk_in_another_format_is_dropped_with_an_error_and_the_rest_goes_on(start, talk):
    audio, _ = talk
    server = await wyoming_server(start)
    odd = AudioChunk(rate=8000, width=2, channels=1, audio=b"\0" * 320).event()
    events = await command(
        server.wyoming_port, audio, AudioStart(rate=RATE, width=WIDTH, channels=1).event(), odd
    )
    (error,) = of_type(events, "error")
    assert error.data["code"] == "bad_message" and "rate 8000" in error.data["text"]
    whole = Transcript.from_event(of_type(events, "transcript")[0])
    assert whole.text == await native_text(server.port, audio)


async def test_a_quiet_client_is_told_idle_timeout(start):
    server = await wyoming_server(start, server={"idle_timeout_s": 0.5})
    async with AsyncTcpClient("127.0.0.1", server.wyoming_port) as client:
        await client.write_event(AudioStart(rate=RATE, width=WIDTH, channels=CHANNELS).event())
        events = await read_all(client)
    assert [e.data.get("code") for e in events] == ["idle_timeout"]


async def test_a_client_before_its_audio_is_told_the_server_stops(start):
    """A connection that has asked ``describe`` and sent no audio yet, when the server
    stops: told ``shutting_down`` and closed at once, not left to its idle timeout."""
    server = await wyoming_server(start, server={"idle_timeout_s": 60})
    async with AsyncTcpClient("127.0.0.1", server.wyoming_port) as client:
        await client.write_event(Describe().event())
        info = await asyncio.wait_for(client.read_event(), 30)
        assert info is not None and Info.is_type(info.type)
        await asyncio.wait_for(server.stop(), 10)
        events = await asyncio.wait_for(read_all(client), 5)
    assert [e.data.get("code") for e in events] == ["shutting_down"]


async def test_with_keys_its_clients_stream_as_the_named_key(start, talk):
    """Wyoming carries no key: on a server with keys, wyoming.key names the one its
    clients stream as (its per-key limit applies), and settings without one are refused."""
    audio, _ = talk
    server = await wyoming_server(
        start,
        token="secret",
        wyoming={"key": "token"},
        server={"max_sessions_per_key": 1},
    )
    async with AsyncTcpClient("127.0.0.1", server.wyoming_port) as first:
        await first.write_event(AudioStart(rate=RATE, width=WIDTH, channels=CHANNELS).event())
        while server.endpoint.live_sessions == 0:
            await asyncio.sleep(0.01)
        refused = await command(server.wyoming_port, audio[:16000])
        assert [e.data.get("code") for e in refused] == ["too_many_sessions"]
        chunk = AudioChunk(rate=RATE, width=WIDTH, channels=CHANNELS, audio=pcm16(audio[:48000]))
        await first.write_event(chunk.event())
        await first.write_event(AudioStop().event())
        assert of_type(await read_all(first), "transcript")[0].data["text"]
    with pytest.raises(ValueError, match="wyoming.key"):
        Settings(token="secret", wyoming={"port": 0})
    with pytest.raises(ValueError, match="without API keys"):
        Settings(wyoming={"port": 10300, "host": "0.0.0.0"})


async def test_addresses_outside_the_allowed_networks_are_refused(start):
    server = await wyoming_server(start, wyoming={"allowed_networks": ["10.0.0.0/8"]})
    async with AsyncTcpClient("127.0.0.1", server.wyoming_port) as client:
        await client.write_event(Describe().event())
        events = await read_all(client)
    assert [e.data.get("code") for e in events] == ["unauthorized"]
    allowed = await wyoming_server(start, wyoming={"allowed_networks": ["127.0.0.0/8"]})
    async with AsyncTcpClient("127.0.0.1", allowed.wyoming_port) as client:
        await client.write_event(Describe().event())
        assert Info.is_type((await client.read_event()).type)


async def test_a_drain_gives_a_command_under_way_its_whole_transcript(start, talk):
    audio, _ = talk
    server = await wyoming_server(start)
    native = await native_text(server.port, audio)
    async with AsyncTcpClient("127.0.0.1", server.wyoming_port) as client:
        await client.write_event(AudioStart(rate=RATE, width=WIDTH, channels=CHANNELS).event())
        sent = pcm16(audio)
        for i in range(0, len(sent), 3200):
            chunk = AudioChunk(rate=RATE, width=WIDTH, channels=CHANNELS, audio=sent[i : i + 3200])
            await client.write_event(chunk.event())
        await asyncio.sleep(0.5)  # every chunk read before the drain
        draining = asyncio.create_task(server.endpoint.drain(30))
        events = await read_all(client)
        await draining
    whole = Transcript.from_event(of_type(events, "transcript")[0])
    assert whole.text == native


async def test_zeroconf_advertises_the_port_as_home_assistant_discovers_it(start):
    """With ``wyoming.zeroconf``, an mDNS query for the name's ``_wyoming._tcp`` service
    (python-zeroconf's, as Home Assistant's discovery asks) finds the port at the
    listener's address, and ``describe`` there lists the service; once the server stops,
    the advert is withdrawn and the query finds nothing."""
    from zeroconf.asyncio import AsyncZeroconf

    from parley.transport.wyoming_discovery import SERVICE_TYPE

    name = f"parley-test-{os.getpid()}"  # unique on a network other runs may share
    server = await wyoming_server(start, wyoming={"host": "127.0.0.1", "zeroconf": name})
    asker = AsyncZeroconf()
    try:
        found = await asker.async_get_service_info(SERVICE_TYPE, f"{name}.{SERVICE_TYPE}", 5000)
        assert found is not None, "no answer to the mDNS query"
        assert (found.parsed_addresses(), found.port) == (["127.0.0.1"], server.wyoming_port)
        assert server.wyoming_advert.name == name
        async with AsyncTcpClient(found.parsed_addresses()[0], found.port) as client:
            await client.write_event(Describe().event())
            assert Info.from_event(await client.read_event()).asr[0].name == "parley"
        await server.stop()
        withdrawn = AsyncZeroconf()  # asks afresh, without what the first one heard
        try:
            gone = await withdrawn.async_get_service_info(
                SERVICE_TYPE, f"{name}.{SERVICE_TYPE}", 1500
            )
        finally:
            await withdrawn.async_close()
        assert gone is None
    finally:
        await asker.async_close()


@pytest.mark.parametrize(
    "wyoming, problem",
    [
        ({"zeroconf": "parley"}, "set wyoming.port"),
        ({"port": 10300, "zeroconf": "living.room"}, "without dots"),
        ({"port": 10300, "zeroconf": "x" * 64}, "1 to 63 bytes"),
    ],
)
def test_a_zeroconf_name_that_cannot_be_advertised_is_refused(wyoming, problem):
    with pytest.raises(ValueError, match=problem):
        Settings(wyoming=wyoming)


@pytest.mark.parametrize(
    "flags, name",
    [([], None), (["--wyoming-zeroconf"], "parley"), (["--wyoming-zeroconf", "den"], "den")],
)
def test_parley_serve_advertises_under_the_name_its_flag_gives(flags, name):
    from parley.cli import SERVE_FLAGS, _settings
    from parley.cli_parser import build_parser

    parser = build_parser(dict.fromkeys(["serve", "cluster", "stream", "transcribe", "models"]))
    args = parser.parse_args(["serve", "--wyoming-port", "10300", *flags])
    settings, _ = _settings(args, SERVE_FLAGS)
    assert (settings.wyoming.port, settings.wyoming.zeroconf) == (10300, name)


def test_transcribe_becomes_the_sessions_settings():
    """The language's first subtag; names then terms as keyterms (a comma parts a term,
    terms past the limits are left out); the stream's format; no partials."""
    query = session_query(
        {
            "language": "pt_BR",
            "transcript_names": ["Living Room Lamp", "x" * 60, 7],
            "transcript_terms": ["thermostat, heat pump", "Living Room Lamp"],
        },
        (22050, 2, 2),
    )
    assert query == (
        "encoding=pcm_s16le&sample_rate=22050&channels=2&partials=false&language=pt"
        "&keyterms=Living+Room+Lamp%2Cthermostat%2Cheat+pump"
    )


async def test_the_real_model_transcribes_a_command_and_hears_its_terms(diarized_server):
    """tiny.en through the Wyoming port, three commands at once: a plain one is written
    as said; a name tiny.en writes otherwise in this voice ("Qubanit") is written right
    when transcribe's transcript_terms name it, as Home Assistant names its entities."""
    said = "Turn on the kitchen lights and open the garage door."
    port = diarized_server.wyoming_port
    plain, termed, unnamed = await asyncio.gather(
        command(port, speak(said), Transcribe(language="en").event()),
        command(
            port,
            speak(TERM_SENTENCE, "en-gb-x-rp"),
            Transcribe(transcript_names=["Siobhan"], transcript_terms=[TERM, "PostgreSQL"]).event(),
        ),
        command(port, speak(TERM_SENTENCE, "en-gb-x-rp"), Transcribe().event()),
    )
    texts = [
        Transcript.from_event(of_type(e, "transcript")[0]).text for e in (plain, termed, unnamed)
    ]
    assert wer(said, texts[0]) <= 0.1, texts[0]
    assert TERM in texts[1] and TERM not in texts[2], texts
