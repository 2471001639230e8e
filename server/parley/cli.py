"""argv → settings → run: `parley serve | stream | models`."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from parley.client.formats import FORMATS


def _serve(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from parley.app import serve_forever
    from parley.config import Settings

    overrides: dict = {"server": {}, "asr": {}, "diarization": {}}
    for flag, section, key in [("host", "server", "host"), ("port", "server", "port"),
                               ("max_sessions", "server", "max_sessions"),
                               ("model", "asr", "model"), ("device", "asr", "device"),
                               ("threads", "asr", "threads"),
                               ("assistant", "asr", "assistant"),
                               ("assistant_languages", "asr", "assistant_languages"),
                               ("context_tokens", "asr", "context_tokens"),
                               ("partial_interval", "asr", "partial_interval_s"),
                               ("diarization", "diarization", "source")]:
        value = getattr(args, flag)
        if value is not None:
            overrides[section][key] = value
    if args.models_dir is not None:
        overrides["models_dir"] = args.models_dir
    try:
        settings = Settings(**overrides)
    except ValidationError as exc:
        print(f"parley: invalid settings:\n{exc}", file=sys.stderr)
        return 2
    _logging(settings.log_level)
    try:
        asyncio.run(serve_forever(settings))
    except (OSError, RuntimeError, ValueError) as exc:
        print(f"parley: {exc}", file=sys.stderr)
        return 1
    return 0


def _stream(args: argparse.Namespace) -> int:
    from websockets.exceptions import InvalidHandshake, InvalidURI

    from parley.client.formats import render
    from parley.client.stream import (LiveDisplay, ffmpeg_pcm, run_stream, stdin_pcm,
                                      stream_url, token_from_env)
    from parley.protocol.messages import StreamConfig

    rate = args.sample_rate if args.source == "-" else 16000
    config = StreamConfig(sample_rate=rate, channels=args.channels if args.source == "-" else 1,
                          language=args.language, partials=not args.no_partials)
    bytes_per_second = rate * 2 * config.channels
    if args.source == "-":
        chunks = stdin_pcm(int(bytes_per_second * 0.1) // config.bytes_per_frame
                           * config.bytes_per_frame)
    else:
        if not Path(args.source).is_file():
            print(f"parley: no such file: {args.source}", file=sys.stderr)
            return 2
        chunks = ffmpeg_pcm(args.source, rate)
    url = stream_url(args.url, config, token_from_env())
    live_to_stdout = args.format == "text" and args.output is None
    display = LiveDisplay(sys.stdout if live_to_stdout else sys.stderr, not args.no_partials)
    try:
        result = asyncio.run(run_stream(url, chunks, bytes_per_second, fast=args.fast,
                                        on_message=display))
    except (OSError, RuntimeError) as exc:
        print(f"parley: {exc}", file=sys.stderr)
        return 1
    except (InvalidHandshake, InvalidURI) as exc:  # not a Parley stream endpoint
        print(f"parley: {exc} (a Parley server streams at ws://HOST:PORT/v1/stream)",
              file=sys.stderr)
        return 1
    if not live_to_stdout:
        text = render(result.finals, args.format)
        if args.output:
            Path(args.output).write_text(text, encoding="utf-8")
        else:
            sys.stdout.write(text)
    fatal = [e for e in result.errors if e.get("fatal")]
    return 1 if fatal or result.ended is None else 0


def _models(args: argparse.Namespace) -> int:
    from parley.config import default_models_dir
    from parley.models.bundle import BUNDLE, DIARIZATION, install_bundle, verify

    models_dir = Path(args.models_dir) if args.models_dir else default_models_dir()
    if args.action == "install":
        _logging("info")
        try:
            for path in install_bundle(models_dir, args.names or None, force=args.force):
                print(f"ok  {path}")
        except Exception as exc:
            print(f"parley: model install failed: {exc}", file=sys.stderr)
            return 1
        return 0
    status = 0
    described = {**{n: s.description for n, s in BUNDLE.items()},
                 DIARIZATION.name: DIARIZATION.description}
    for name, description in described.items():
        problems = verify(models_dir / name)
        print(f"{'ok ' if not problems else '-- '} {name:11} {description}"
              + ("" if not problems else f"  ({problems[0]})"))
        status |= bool(problems and args.action == "verify")
    return status


def _logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: "
                                                    "%(message)s")
    if level != "debug":  # websockets logs every HTTP request and close at INFO
        logging.getLogger("websockets").setLevel(logging.WARNING)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="parley", description="Real-time transcription server")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the server (settings also from PARLEY_*)")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument("--model", help="bundle name (tiny.en, base), local path or hub id")
    serve.add_argument("--device", choices=["auto", "cpu", "cuda"])
    serve.add_argument("--threads", type=int)
    serve.add_argument("--assistant", help="draft model for speculative decoding (same "
                                           "tokenizer as --model)")
    serve.add_argument("--assistant-languages", nargs="+", metavar="LANG",
                       help="use the assistant only for these languages (e.g. en)")
    serve.add_argument("--context-tokens", type=int,
                       help="tokens of earlier finals given to the model as its prompt")
    serve.add_argument("--partial-interval", type=float, help="seconds between partials")
    serve.add_argument("--max-sessions", type=int)
    serve.add_argument("--diarization", metavar="off|bundle|HUB_ID|PATH",
                       help="speaker labels: the offline bundle, or a pyannote pipeline "
                            "(hub ids read HF_TOKEN from the environment)")
    serve.add_argument("--models-dir")
    serve.set_defaults(run=_serve)

    stream = commands.add_parser("stream", help="stream a file (or raw PCM16 on stdin)")
    stream.add_argument("source", help="audio file ffmpeg can read, or - for raw PCM16 LE")
    stream.add_argument("--url", default="ws://127.0.0.1:8765/v1/stream")
    stream.add_argument("--fast", action="store_true",
                        help="send as fast as the server accepts, not in real time")
    stream.add_argument("--format", choices=FORMATS, default="text")
    stream.add_argument("--output", "-o", help="write the transcript here, not to stdout")
    stream.add_argument("--language")
    stream.add_argument("--no-partials", action="store_true")
    stream.add_argument("--sample-rate", type=int, default=16000, help="of raw stdin PCM")
    stream.add_argument("--channels", type=int, default=1, help="of raw stdin PCM")
    stream.set_defaults(run=_stream)

    models = commands.add_parser("models", help="the offline model bundle")
    models.add_argument("action", choices=["install", "list", "verify"])
    models.add_argument("names", nargs="*", help="bundle models to install (default: all)")
    models.add_argument("--models-dir", help="default ~/.cache/parley/models")
    models.add_argument("--force", action="store_true", help="import again even if verified")
    models.set_defaults(run=_models)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
