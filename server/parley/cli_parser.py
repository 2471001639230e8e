"""The `parley` command line's arguments: its subcommands and their flags."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from pathlib import Path

from parley.client.captions import SUBTITLES, CaptionStyle
from parley.client.formats import FORMATS
from parley.core.asr import COMPUTE_TYPES


def known_voice(value: str) -> tuple[str, Path]:
    """``--speaker NAME=CLIP`` as (name, clip)."""
    name, equals, clip = value.partition("=")
    if not equals or not clip:
        raise argparse.ArgumentTypeError(f"--speaker takes NAME=CLIP, not {value!r}")
    if not Path(clip).is_file():
        raise argparse.ArgumentTypeError(f"--speaker {name}: no such file: {clip}")
    return name, Path(clip)


def add_speaker_arg(parser: argparse.ArgumentParser, effect: str) -> None:
    """``--speaker NAME=CLIP``, repeatable: a voice the user knows."""
    parser.add_argument(
        "--speaker",
        action="append",
        default=[],
        type=known_voice,
        metavar="NAME=CLIP",
        help=f"a voice you know: {effect} (CLIP: 2 to 10 s of it; repeatable)",
    )


def add_caption_args(parser: argparse.ArgumentParser) -> None:
    """How much a subtitle cue holds (srt, vtt; openai-whisper's option names)."""
    parser.add_argument(
        "--max-line-width",
        type=int,
        default=SUBTITLES.line_chars,
        metavar="N",
        help=f"srt and vtt: characters on a line (default {SUBTITLES.line_chars})",
    )
    parser.add_argument(
        "--max-line-count",
        type=int,
        default=SUBTITLES.lines,
        metavar="N",
        help=f"srt and vtt: lines in a cue (default {SUBTITLES.lines})",
    )


def caption_style(args: argparse.Namespace) -> CaptionStyle:
    """The cues the flags ask for; ValueError out of range."""
    return CaptionStyle(line_chars=args.max_line_width, lines=args.max_line_count)


def decoding_args(args: argparse.Namespace) -> dict:
    """The decoding options of ``parley stream`` as StreamConfig's fields (ValueError
    for what is out of bounds)."""
    from parley.core.asr import Task
    from parley.core.keyterms import check_keyterms
    from parley.core.replacements import check_replacements
    from parley.protocol.errors import ProtocolError
    from parley.protocol.stream_config import language_tags

    try:
        codes = [c for c in ",".join(args.languages or ()).split(",") if c.strip()]
        languages = language_tags(codes, "--languages")
    except ProtocolError as exc:
        raise ValueError(exc.message) from None
    return {
        "languages": languages,
        "keyterms": check_keyterms(args.keyterm),
        "prompt": args.prompt,
        "task": Task(args.task),
        "redact": tuple(sorted(set(args.redact))),
        "numerals": args.numerals,
        "replace": check_replacements(args.replace),
        "filler_words": args.filler_words,
        "profanity_filter": args.profanity_filter,
        "dictation": args.dictation,
    }


def add_decoding_args(parser: argparse.ArgumentParser) -> None:
    """The decoding options the commands that transcribe share: keyterms, prompt, task,
    redaction, numerals, fillers, replacements and the compute type."""
    parser.add_argument(
        "--keyterm",
        action="append",
        default=[],
        metavar="TERM",
        help="a name or term to favour (repeatable)",
    )
    parser.add_argument("--prompt", help="text the model reads first (spelling, style)")
    parser.add_argument(
        "--languages",
        action="append",
        metavar="CODES",
        help="detect each segment's language among these only (en,es; repeatable)",
    )
    parser.add_argument(
        "--task",
        choices=["transcribe", "translate"],
        default="transcribe",
        help="translate: into English (a multilingual model)",
    )
    parser.add_argument(
        "--redact",
        action="append",
        default=[],
        choices=["pci", "ssn", "phone", "numbers"],
        help="(repeatable)",
    )
    parser.add_argument("--numerals", action="store_true", help="number words as digits")
    parser.add_argument("--filler-words", action="store_true", help='write "um" and "uh"')
    parser.add_argument(
        "--profanity-filter", action="store_true", help="profane words masked (f***)"
    )
    parser.add_argument(
        "--dictation", action="store_true", help='spoken punctuation as marks ("comma": ",")'
    )
    parser.add_argument(
        "--replace",
        action="append",
        default=[],
        metavar="FIND:REPLACEMENT",
        help="words or a phrase written otherwise in every result (repeatable)",
    )


def add_compute_type(parser: argparse.ArgumentParser) -> None:
    """The models' precision (`asr.compute_type`), for serving and for `parley transcribe`."""
    parser.add_argument(
        "--compute-type",
        choices=COMPUTE_TYPES,
        help="auto: fp16 on CUDA; on a CPU bfloat16 where it has AMX or AVX-512 BF16, "
        "else float32; int8: faster on a CPU; bfloat16: the encoder in bfloat16, faster "
        "on a CPU with AMX or AVX-512 BF16",
    )


def add_server_flags(parser: argparse.ArgumentParser) -> None:
    """The model, session and access flags of `parley serve` and `parley cluster`."""
    parser.add_argument("--model", help="bundle name (tiny.en, base), local path or hub id")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"])
    add_compute_type(parser)
    parser.add_argument("--threads", type=int)
    parser.add_argument(
        "--assistant", help="draft model for speculative decoding (same tokenizer as --model)"
    )
    parser.add_argument(
        "--assistant-languages",
        nargs="+",
        metavar="LANG",
        help="use the assistant only for these languages (e.g. en)",
    )
    parser.add_argument(
        "--context-tokens",
        type=int,
        help="tokens of earlier finals given to the model as its prompt",
    )
    parser.add_argument("--partial-interval", type=float, help="seconds between partials")
    parser.add_argument("--max-sessions", type=int)
    parser.add_argument(
        "--diarization",
        metavar="off|bundle|HUB_ID|PATH",
        help="speaker labels: the offline bundle, or a pyannote pipeline "
        "(hub ids read HF_TOKEN from the environment)",
    )
    parser.add_argument("--models-dir")
    parser.add_argument(
        "--api-keys-file",
        help="file of name:key lines (or set PARLEY_API_KEYS to a JSON object of name → key)",
    )
    parser.add_argument(
        "--allow-anonymous",
        action="store_true",
        help="serve a non-loopback address without API keys",
    )
    parser.add_argument(
        "--allowed-origins",
        nargs="+",
        metavar="ORIGIN",
        help="browser origins that may stream (default: this server's own; '*' for any)",
    )
    parser.add_argument("--max-session-s", type=float, help="longest session, in seconds")
    parser.add_argument("--max-sessions-per-key", type=int)
    parser.add_argument(
        "--drain-timeout",
        type=float,
        help="on SIGTERM, seconds live sessions may take to finish (default 30)",
    )
    parser.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    parser.add_argument("--log-format", choices=["text", "json"])


# Each subcommand's function, by name.
Runners = Mapping[str, Callable[[argparse.Namespace], int]]


def build_parser(run: Runners) -> argparse.ArgumentParser:
    """The `parley` command line; ``run``: each subcommand's function, by name."""
    parser = argparse.ArgumentParser(prog="parley", description="Real-time transcription server")
    commands = parser.add_subparsers(dest="command", required=True)
    _add_serve(commands, run)
    _add_cluster(commands, run)
    _add_stream(commands, run)
    _add_transcribe(commands, run)
    _add_models(commands, run)
    return parser


def _add_serve(commands: argparse._SubParsersAction, run: Runners) -> None:
    """`parley serve`: the server, on this machine."""
    serve = commands.add_parser("serve", help="run the server (settings also from PARLEY_*)")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument("--ssl-certfile", help="serve wss:// with this certificate chain (PEM)")
    serve.add_argument("--ssl-keyfile", help="its private key (PEM), if not in the certfile")
    serve.add_argument(
        "--wyoming-port", type=int, help="also serve Home Assistant's Wyoming protocol (10300)"
    )
    serve.add_argument(
        "--wyoming-zeroconf",
        nargs="?",
        const="parley",
        metavar="NAME",
        help="advertise the Wyoming port on the local network for Home Assistant to "
        "discover, under NAME (parley)",
    )
    add_server_flags(serve)
    serve.set_defaults(run=run["serve"])


def _add_cluster(commands: argparse._SubParsersAction, run: Runners) -> None:
    """`parley cluster`: the server on a Ray cluster."""
    cluster = commands.add_parser(
        "cluster",
        help="serve on a Ray cluster (started here, or joined with --address) until Ctrl-C",
    )
    cluster.add_argument(
        "--address",
        help="the Ray cluster to join (auto: the one `ray start` made here); default: start one",
    )
    cluster.add_argument("--host", help="where Ray Serve's proxy listens (default 127.0.0.1)")
    cluster.add_argument("--port", type=int, help="default 8000")
    cluster.add_argument("--replicas", type=int, help="replicas (default 2)")
    cluster.add_argument(
        "--max-replicas", type=int, help="autoscale on live sessions up to this many replicas"
    )
    cluster.add_argument("--num-gpus", type=float, help="GPUs per replica (1: one each)")
    cluster.add_argument("--num-cpus", type=float, help="CPUs per replica (default 1)")
    add_server_flags(cluster)
    cluster.set_defaults(run=run["cluster"])


def _add_stream(commands: argparse._SubParsersAction, run: Runners) -> None:
    """`parley stream`: a file or stdin streamed to a server."""
    stream = commands.add_parser("stream", help="stream a file (or raw PCM16 on stdin)")
    stream.add_argument(
        "source",
        help="audio file ffmpeg can read, a live source's URL (HLS, RTSP, RTMP, SRT, HTTP), "
        "or - for raw PCM16 LE",
    )
    stream.add_argument("--url", default="ws://127.0.0.1:8765/v1/stream")
    stream.add_argument(
        "--fast", action="store_true", help="send as fast as the server accepts, not in real time"
    )
    stream.add_argument(
        "--format",
        choices=FORMATS,
        default="text",
        help="text: a timed line a final as it comes (a line each speaker's run, where a "
        "final holds a change of turn); json, srt, vtt and rttm are written at the end, "
        "with every speaker_update applied; rttm (speaker turns) implies --diarization",
    )
    stream.add_argument(
        "--diarization",
        action="store_true",
        help="ask for speaker labels (the server must run with diarization)",
    )
    stream.add_argument(
        "--num-speakers",
        type=int,
        help="how many people speak (implies --diarization): no more labels, and the "
        "closing relabel clusters into that many",
    )
    add_speaker_arg(stream, "the label of its voice is shown as NAME (implies --diarization)")
    stream.add_argument("--output", "-o", help="write the transcript here, not to stdout")
    add_caption_args(stream)
    stream.add_argument("--language")
    add_decoding_args(stream)
    stream.add_argument("--token", help="the server's API key (default: $PARLEY_TOKEN)")
    stream.add_argument("--no-partials", action="store_true")
    stream.add_argument("--sample-rate", type=int, default=16000, help="of raw stdin PCM")
    stream.add_argument("--channels", type=int, default=1, help="of raw stdin PCM")
    stream.set_defaults(run=run["stream"])


def _add_transcribe(commands: argparse._SubParsersAction, run: Runners) -> None:
    """`parley transcribe`: recordings, in-process or on a server."""
    transcribe = commands.add_parser(
        "transcribe", help="transcribe recordings in-process (or on a server with --url)"
    )
    transcribe.add_argument("sources", nargs="+", metavar="FILE", help="audio ffmpeg reads")
    transcribe.add_argument("--format", choices=FORMATS, default="text")
    transcribe.add_argument("--output", "-o", help="write here (appended), not to stdout")
    add_caption_args(transcribe)
    transcribe.add_argument("--language")
    transcribe.add_argument(
        "--diarization",
        metavar="off|bundle|HUB_ID|PATH",
        help="speaker labels, in-process (default off; rttm needs it)",
    )
    transcribe.add_argument("--diarize", action="store_true", help="with --url: ask for speakers")
    transcribe.add_argument("--num-speakers", type=int)
    add_speaker_arg(transcribe, "its turns are labelled NAME")
    add_decoding_args(transcribe)
    transcribe.add_argument("--model", help="bundle name (tiny.en, base), path or hub id")
    add_compute_type(transcribe)
    transcribe.add_argument("--models-dir")
    transcribe.add_argument(
        "--url", help="a Parley server's base URL (http://host:port): send the files there instead"
    )
    transcribe.add_argument("--token", help="with --url: the API key (default $PARLEY_TOKEN)")
    transcribe.set_defaults(run=run["transcribe"])


def _add_models(commands: argparse._SubParsersAction, run: Runners) -> None:
    """`parley models`: the offline model bundle."""
    models = commands.add_parser("models", help="the offline model bundle")
    models.add_argument("action", choices=["install", "list", "verify"])
    models.add_argument("names", nargs="*", help="bundle models to install (default: all)")
    models.add_argument(
        "--models-dir", help="default $PARLEY_MODELS_DIR, else ~/.cache/parley/models"
    )
    models.add_argument("--force", action="store_true", help="import again even if verified")
    models.set_defaults(run=run["models"])
