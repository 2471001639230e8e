"""Every path the server answers on: the streaming wires (WebSocket), the recordings'
endpoints (HTTP POST), the followers of a session, and the probes. protocol.md names
each; tests/test_protocol_doc.py holds the two together."""

from __future__ import annotations

import re

# WebSocket wires
STREAM_PATH = "/v1/stream"  # Parley's own (sections 1 to 8)
LISTEN_PATH = "/v1/listen"  # Deepgram's live API (section 9); POST: its pre-recorded API
FLUX_PATH = "/v2/listen"  # Deepgram Flux's turn-based live API (section 9a)
REALTIME_PATH = "/v1/realtime"  # OpenAI's realtime transcription (section 10)
TWILIO_PATH = "/v1/twilio"  # Twilio Media Streams (section 11)
MEETING_PATH = "/v1/meeting"  # meeting bots, a track per participant (section 13)
ASSEMBLYAI_PATH = "/v3/ws"  # AssemblyAI's Universal-Streaming v3 (section 10a)
# WhisperLive's (section 10b): its clients connect to ws://HOST:PORT, with no path; a
# plain GET of / is still the browser page
WHISPERLIVE_PATH = "/"
# Home Assistant's Wyoming protocol (section 10c) is no WebSocket: it has a TCP port of
# its own. This names its sessions' wire (in logs and webhooks), and no URL path can be it
WYOMING_PATH = "tcp/wyoming"
# /v1/sessions/{session_id}/events: a live session's results, for its followers
FOLLOW_PATH = re.compile(r"^/v1/sessions/([0-9a-f]{32})/events$")

# Recordings (HTTP POST)
TRANSCRIPTIONS_PATH = "/v1/audio/transcriptions"  # OpenAI's file API
TRANSLATIONS_PATH = "/v1/audio/translations"  # OpenAI's, into English
PREDICT_PATH = "/predict"  # the reference handler's
# AssemblyAI's pre-recorded API: an upload, then a transcript job polled by its id
UPLOAD_PATH = "/v2/upload"
TRANSCRIPT_PATH = "/v2/transcript"  # POST; GET or DELETE /v2/transcript/{id}, …/{id}/srt|vtt
# OpenAI's model listing (HTTP GET; /v1/models/{model}: one model)
MODELS_PATH = "/v1/models"

# Access tokens for browsers, minted with a key (section 17): Parley's, Deepgram's,
# AssemblyAI's (GET) and OpenAI's
TOKEN_PATH = "/v1/auth/token"
GRANT_PATH = "/v1/auth/grant"
TEMPORARY_TOKEN_PATH = "/v3/token"
CLIENT_SECRETS_PATH = "/v1/realtime/client_secrets"

# Probes and metrics (HTTP GET)
HEALTH_PATH = "/healthz"
READY_PATH = "/readyz"
METRICS_PATH = "/metrics"
