"""argv → settings → run: `parley serve | cluster | stream | transcribe | models` (the
arguments themselves are cli_parser.py's)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

from parley.cli_parser import build_parser, caption_style, decoding_args

# Exit codes (README "Exit codes"): scripts tell a bad input from a server they could not
# reach, which is worth retrying.
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_UNREACHABLE = 0, 1, 2, 3
EXIT_INTERRUPTED = 130  # as a shell reports a process ended by SIGINT

SERVE_FLAGS = [
    ("host", "server", "host"),
    ("port", "server", "port"),
    ("max_sessions", "server", "max_sessions"),
    ("model", "asr", "model"),
    ("device", "asr", "device"),
    ("compute_type", "asr", "compute_type"),
    ("threads", "asr", "threads"),
    ("assistant", "asr", "assistant"),
    ("assistant_languages", "asr", "assistant_languages"),
    ("context_tokens", "asr", "context_tokens"),
    ("partial_interval", "asr", "partial_interval_s"),
    ("diarization", "diarization", "source"),
    ("max_session_s", "server", "max_session_s"),
    ("max_sessions_per_key", "server", "max_sessions_per_key"),
    ("drain_timeout", "server", "drain_timeout_s"),
    ("allowed_origins", "server", "allowed_origins"),
    ("ssl_certfile", "server", "ssl_certfile"),
    ("ssl_keyfile", "server", "ssl_keyfile"),
    ("wyoming_port", "wyoming", "port"),
    ("wyoming_zeroconf", "wyoming", "zeroconf"),
]
SERVE_ONLY = ("host", "port", "ssl_certfile", "ssl_keyfile", "wyoming_port", "wyoming_zeroconf")
CLUSTER_FLAGS = [
    ("address", "cluster", "address"),
    ("host", "cluster", "host"),
    ("port", "cluster", "port"),
    ("replicas", "cluster", "replicas"),
    ("max_replicas", "cluster", "max_replicas"),
    ("num_gpus", "cluster", "num_gpus"),
    ("num_cpus", "cluster", "num_cpus"),
    *[flag for flag in SERVE_FLAGS if flag[0] not in SERVE_ONLY],
]


def _settings(args: argparse.Namespace, flags: list[tuple[str, str, str]]):
    """Settings from the environment and these flags, the access they give, and the
    process's logging; or None (after saying why) when they are not valid."""
    from pydantic import ValidationError

    from parley.config import Settings
    from parley.loading import access_of, redaction_of
    from parley.logs import configure_logging

    overrides: dict = {section: {} for _, section, _ in flags}
    for flag, section, key in flags:
        value = getattr(args, flag)
        if value is not None:
            overrides[section][key] = value
    for flag in ("models_dir", "api_keys_file", "log_level", "log_format"):
        if getattr(args, flag) is not None:
            overrides[flag] = getattr(args, flag)
    if args.allow_anonymous:
        overrides["allow_anonymous"] = True
    try:
        settings = Settings(**overrides)
        access = access_of(settings)  # the key file is read once, here
    except (ValidationError, ValueError, OSError) as exc:
        print(f"parley: invalid settings:\n{exc}", file=sys.stderr)
        return None
    configure_logging(settings.log_level, settings.log_format, *redaction_of(access, settings))
    return settings, access


def _serve(args: argparse.Namespace) -> int:
    from parley.app import serve_forever

    valid = _settings(args, SERVE_FLAGS)
    if valid is None:
        return EXIT_BAD_INPUT
    try:
        asyncio.run(serve_forever(*valid))
    except (OSError, RuntimeError, ValueError) as exc:
        print(f"parley: {exc}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def _cluster(args: argparse.Namespace) -> int:
    from parley.cluster.run import serve_cluster

    valid = _settings(args, CLUSTER_FLAGS)
    if valid is None:
        return EXIT_BAD_INPUT
    serve_cluster(valid[0])
    return EXIT_OK


def _stream(args: argparse.Namespace) -> int:
    from websockets.exceptions import ConnectionClosedError, InvalidHandshake, InvalidURI

    from parley.client.formats import render
    from parley.client.live import Unreachable
    from parley.client.stream import (
        LiveDisplay,
        UndecodableAudio,
        ffmpeg_pcm,
        is_url,
        stdin_pcm,
        stream_until_stopped,
        stream_url,
        token_from_env,
    )
    from parley.client.transcript import Transcript
    from parley.protocol.messages import EndReason, ServerMessage, StreamConfig

    rate = args.sample_rate if args.source == "-" else 16000
    try:
        decoding, style = decoding_args(args), caption_style(args)
    except ValueError as exc:
        print(f"parley: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    config = StreamConfig(
        sample_rate=rate,
        channels=args.channels if args.source == "-" else 1,
        language=args.language,
        partials=not args.no_partials,
        diarization=args.diarization
        or args.format == "rttm"
        or args.num_speakers is not None
        or bool(args.speaker),
        num_speakers=args.num_speakers,
        **decoding,
    )
    bytes_per_second = rate * 2 * config.channels
    if args.source == "-":
        chunks = stdin_pcm(
            int(bytes_per_second * 0.1) // config.bytes_per_frame * config.bytes_per_frame
        )
    else:
        if not is_url(args.source) and not Path(args.source).is_file():
            print(f"parley: no such file: {args.source}", file=sys.stderr)
            return EXIT_BAD_INPUT
        chunks = ffmpeg_pcm(args.source, rate)
    url = stream_url(args.url, config, args.token or token_from_env())
    live_to_stdout = args.format == "text" and args.output is None
    display = LiveDisplay(sys.stdout if live_to_stdout else sys.stderr, not args.no_partials)
    transcript = Transcript()

    def on_message(message: ServerMessage) -> None:
        transcript.apply(message)
        display(message)

    try:
        known = [(name, clip.read_bytes()) for name, clip in args.speaker]
        result = stream_until_stopped(
            url, chunks, bytes_per_second, args.fast, on_message, _stopping, known
        )
    except Unreachable as exc:
        print(f"parley: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except UndecodableAudio as exc:
        print(f"parley: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (OSError, RuntimeError) as exc:
        print(f"parley: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except ConnectionClosedError as exc:  # no session_ended: the server or network went
        print(f"parley: the connection was lost before the session ended ({exc})", file=sys.stderr)
        return EXIT_FAILED
    except (InvalidHandshake, InvalidURI) as exc:  # not a Parley stream endpoint
        print(
            f"parley: {exc} (a Parley server streams at ws://HOST:PORT/v1/stream)", file=sys.stderr
        )
        return EXIT_FAILED
    if not live_to_stdout:
        uri = "stdin" if args.source == "-" else Path(args.source).stem
        text = render(transcript, args.format, uri, style)
        if args.output:
            Path(args.output).write_text(text, encoding="utf-8")
        else:
            sys.stdout.write(text)
    fatal = [e for e in result.errors if e.fatal]
    ended = result.ended
    if ended is not None and ended.reason != EndReason.END_OF_STREAM:
        # a drain or the duration limit: the rest was not sent
        print(
            f"parley: the server ended the session ({ended.reason.value}) after "
            f"{ended.audio_duration:.1f} s of audio",
            file=sys.stderr,
        )
    whole = ended is not None and ended.reason == EndReason.END_OF_STREAM
    return EXIT_OK if whole and not fatal else EXIT_FAILED


def _stopping() -> None:
    print(
        "\nparley: stopping: the last finals are coming (Ctrl-C again to quit now)", file=sys.stderr
    )


def _transcribe(args: argparse.Namespace) -> int:
    """Recordings, in-process (the server's own file pipeline), or sent to --url."""
    from parley.core.speaker_names import check_known_speakers

    try:
        decoding = {**decoding_args(args), "prompt": args.prompt or ""}
        style = caption_style(args)
        known = args.speaker  # (name, clip) pairs
        check_known_speakers([name for name, _ in known], len(known))
    except ValueError as exc:
        print(f"parley: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    missing = [source for source in args.sources if not Path(source).is_file()]
    if missing:  # before a model loads or a request is sent
        print(f"parley: no such file: {', '.join(missing)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.url:
        from parley.client.files import UnreadableRecording, transcribe_file
        from parley.client.live import Unreachable

        token = args.token or os.environ.get("PARLEY_TOKEN")
        for source in args.sources:
            try:
                text = transcribe_file(
                    args.url,
                    source,
                    args.format,
                    token,
                    args.language,
                    args.num_speakers is not None or args.diarize or bool(known),
                    decoding=decoding,
                    known_speakers=known,
                    style=style,
                )
            except Unreachable as exc:
                print(f"parley: {exc}", file=sys.stderr)
                return EXIT_UNREACHABLE
            except (RuntimeError, ValueError, OSError) as exc:
                print(f"parley: {source}: {exc}", file=sys.stderr)
                return EXIT_BAD_INPUT if isinstance(exc, UnreadableRecording) else EXIT_FAILED
            _write(args.output, text)
        return EXIT_OK
    from parley.local import local_settings, transcribe_locally
    from parley.recordings.media import UndecodableAudio

    try:
        settings = local_settings(
            args.model, args.diarization or "off", args.models_dir, args.compute_type
        )
    except ValueError as exc:
        print(f"parley: invalid settings:\n{exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        asyncio.run(
            transcribe_locally(
                settings,
                args.sources,
                args.format,
                args.language,
                args.num_speakers,
                lambda text: _write(args.output, text),  # each file's as soon as it is done
                decoding,
                known,
                style,
            )
        )
    except (RuntimeError, ValueError, OSError) as exc:
        print(f"parley: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT if isinstance(exc, UndecodableAudio) else EXIT_FAILED
    return EXIT_OK


def _write(output: str | None, text: str) -> None:
    if output:
        with open(output, "a", encoding="utf-8") as file:
            file.write(text)
    else:
        sys.stdout.write(text)
        sys.stdout.flush()


def _models(args: argparse.Namespace) -> int:
    from parley.config import default_models_dir
    from parley.weights.bundle import BUNDLE, DIARIZATION, install_bundle, verify

    models_dir = Path(args.models_dir) if args.models_dir else default_models_dir()
    if args.action == "install":
        from parley.logs import configure_logging

        configure_logging("info")
        try:
            for path in install_bundle(models_dir, args.names or None, force=args.force):
                print(f"ok  {path}")
            from parley.models.speaker_models import keep_cpu_exports

            keep_cpu_exports(models_dir)  # so that no start has to make them
        except Exception as exc:
            print(f"parley: model install failed: {exc}", file=sys.stderr)
            return EXIT_FAILED
        return EXIT_OK
    status = 0
    described = {
        **{n: s.description for n, s in BUNDLE.items()},
        DIARIZATION.name: DIARIZATION.description,
    }
    for name, description in described.items():
        problems = verify(models_dir / name)
        print(
            f"{'ok ' if not problems else '-- '} {name:11} {description}"
            + ("" if not problems else f"  ({problems[0]})")
        )
        status |= bool(problems and args.action == "verify")
    return status


def main(argv: list[str] | None = None) -> int:
    """Run the `parley` command line; its exit code."""
    commands = {
        "serve": _serve,
        "cluster": _cluster,
        "stream": _stream,
        "transcribe": _transcribe,
        "models": _models,
    }
    args = build_parser(commands).parse_args(argv)
    try:
        return args.run(args)
    except KeyboardInterrupt:  # what was written (a whole file's transcript) stays whole
        print("\nparley: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
