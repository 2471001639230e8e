"""Speculative decoding is lossless: drafts change the number of passes, never the tokens."""

import numpy as np
import pytest
import torch
from transformers import WhisperConfig, WhisperForCausalLM, WhisperForConditionalGeneration

from audio_fixtures import SAMPLE_RATE, SAMPLE_WAV, at_level, crowd_murmur, read_wav, silence, speak
from parley.core.asr import AsrRequest
from parley.core.attempts import FALLBACK_BELOW, FALLBACK_TEMPERATURES, transcribe
from parley.core.speech_level import SpeechLevel
from parley.models.assistant import IncompatibleAssistant, load_assistant
from parley.models.device import plan_device
from parley.models.drafters import AssistantDrafter, ChainedDrafter, HypothesisDrafter
from parley.models.greedy import GreedyVerifier, RowDecode
from parley.models.output_head import OutputHead
from parley.models.row_decoder import RowDecoder
from parley.models.whisper_engine import WhisperEngine
from parley.weights.bundle import resolve_model

CPU = plan_device("cpu", "float32")  # the same words on every machine (conftest.tiny_engine)


@pytest.fixture(scope="module")
def sample():
    return read_wav(SAMPLE_WAV)


@pytest.fixture(scope="module")
def base_engine(models_dir):
    """base as main model, and base again as a full seq2seq assistant (the one real pair)."""
    source = resolve_model("base", models_dir)
    return WhisperEngine(source, "base", CPU, assistant_source=source, assistant_label="base")


def generate_reference(engine, audio, language=None):
    kwargs = {"language": language, "task": "transcribe"} if engine.multilingual else {}
    with torch.inference_mode():
        out = engine.model.generate(engine.features(audio), **kwargs)[0].tolist()
    return tuple(t for t in out if t < engine.model.generation_config.eos_token_id)


def test_plain_greedy_equals_transformers_generate(tiny_engine, sample):
    """With no drafter, the verifier's output is transformers' greedy generate output."""
    for start, end in [(6.4, 14.0), (14.0, 21.0), (21.0, 30.0)]:
        audio = sample[int(start * 16000) : int(end * 16000)]
        got = tiny_engine.transcribe(audio, budget=0)
        assert got.tokens == generate_reference(tiny_engine, audio) and len(got.tokens) > 10


def test_previous_hypothesis_drafts_are_lossless_and_accepted(tiny_engine, sample):
    """Re-decoding a growing segment with the last hypothesis as draft changes nothing but speed."""
    previous, accepted, plain_passes, drafted_passes = None, 0, 0, 0
    for end in np.arange(8.0, 21.5, 2.5):  # as a partial's segment grows
        audio = sample[int(6.4 * 16000) : int(end * 16000)]
        plain = tiny_engine.transcribe(audio)
        drafted = tiny_engine.transcribe(audio, draft=previous)
        assert drafted.tokens == plain.tokens
        accepted += drafted.stats.accepted
        plain_passes += plain.stats.passes
        drafted_passes += drafted.stats.passes
        previous = plain.tokens
    assert accepted > 50 and drafted_passes < 0.7 * plain_passes


def test_real_assistant_is_lossless_and_fully_accepted(base_engine, sample):
    """base drafting for base: same tokens as plain greedy, and every draft is accepted;
    the assistant's encoder holds the main model's weights, so it reads the main model's
    encoder output rather than computing it again (as distil-large-v3 for large-v3)."""
    assert base_engine.assistant.encoder is None
    audio = sample[int(6.4 * 16000) : int(14.0 * 16000)]
    plain = base_engine.transcribe(audio, language="en", budget=0)
    assisted = base_engine.transcribe(audio, language="en")
    both = base_engine.transcribe(audio[: len(audio) * 3 // 4], language="en")
    combined = base_engine.transcribe(audio, language="en", draft=both.tokens)
    assert assisted.tokens == plain.tokens == combined.tokens
    assert assisted.stats.accepted == assisted.stats.drafted > 0
    assert assisted.stats.passes < plain.stats.passes / 2
    assert plain.tokens == generate_reference(base_engine, audio, "en")


def random_whisper(path, d_model, decoder_layers, causal=False, seed=0, vocab=600):
    """A small random Whisper (or decoder-only WhisperForCausalLM) saved to ``path``."""
    torch.manual_seed(seed)
    config = WhisperConfig(
        vocab_size=vocab,
        num_mel_bins=80,
        d_model=d_model,
        encoder_layers=1,
        decoder_layers=decoder_layers,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=2 * d_model,
        decoder_ffn_dim=2 * d_model,
        max_source_positions=1500,
        max_target_positions=96,
        decoder_start_token_id=vocab - 3,
        eos_token_id=vocab - 1,
        pad_token_id=vocab - 1,
        bos_token_id=vocab - 1,
    )
    cls = WhisperForCausalLM if causal else WhisperForConditionalGeneration
    model = cls(config).eval()
    with torch.no_grad():  # sharper logits than the default init, so greedy paths vary
        for p in model.parameters():
            p.mul_(4.0)
    model.save_pretrained(path)
    return model


def greedy_rows(verifier, prompt, rows, drafters):
    """Decode one row per drafter (None: plain) together, one batched step at a time."""
    decodes = [
        RowDecode(row, prompt, 0, verifier.decoder.max_positions - len(prompt), drafter)
        for row, drafter in zip(rows, drafters)
    ]
    verifier.prime(decodes)
    while live := [d for d in decodes if not d.finished]:
        verifier.step(live, [15] * len(live))
    for row in rows:
        verifier.decoder.release(row)
    return decodes


@pytest.mark.parametrize("causal, assistant_width", [(True, 64), (False, 32), (False, 64)])
def test_random_pairs_of_different_sizes_are_lossless(tmp_path, causal, assistant_width):
    """Random main/assistant pairs of other sizes: plain, assistant-drafted and
    hypothesis-drafted rows decode side by side in the same steps, to the same tokens."""
    main = random_whisper(tmp_path / "main", 64, 3, seed=1)
    random_whisper(tmp_path / "assistant", assistant_width, 1, causal=causal, seed=2)
    assistant = load_assistant(str(tmp_path / "assistant"), "random", main.config, None, CPU, None)
    # A seq2seq assistant with an encoder of its own weights keeps it; one without reads
    # the main model's encoder output.
    assert assistant.share_encoder(main.model.encoder) == causal
    main_rows = RowDecoder(main.model.decoder, capacity=4, max_width=16)
    assistant_rows = RowDecoder(assistant.decoder, capacity=4, max_width=16)
    verifier = GreedyVerifier(
        main_rows,
        OutputHead(main.proj_out),
        suppress=[],
        begin_suppress=[],
        eot=599,
        no_speech_token=None,
        vocab=600,
        device=torch.device("cpu"),
    )
    head = OutputHead(assistant.proj_out)
    torch.manual_seed(3)
    checked = 0
    for trial in range(4):
        features = torch.randn(1, 80, 3000)
        prompt = [597, 598] if trial % 2 else [597]
        with torch.inference_mode():
            hidden = main.model.encoder(features).last_hidden_state
            (plain,) = greedy_rows(verifier, prompt, main_rows.add(hidden), [None])
            (assistant_row,) = assistant_rows.add(assistant.encode(features, hidden))
            drafters = [
                None,
                AssistantDrafter(assistant_row, head, eot=599),
                HypothesisDrafter(plain.tokens[: len(plain.tokens) // 2] + [5, 6, 7]),
            ]
            together = greedy_rows(
                verifier, prompt, main_rows.add(hidden.repeat(3, 1, 1)), drafters
            )
            assistant_rows.release(assistant_row)
        assert [d.tokens for d in together] == [plain.tokens] * 3
        assert together[1].stats.verify_steps > 0
        checked += len(plain.tokens)
    assert checked > 20


@pytest.mark.parametrize("chained", [False, True])
def test_assistant_rows_draft_together_in_one_pass_a_position(tmp_path, chained):
    """Three rows drafting from one assistant decoder (alone, or where a previous
    hypothesis has run out): the same tokens as plain greedy, and each step's drafts
    take one assistant pass per draft position for all rows, not one per row and
    position."""
    main = random_whisper(tmp_path / "main", 64, 3, seed=1)
    random_whisper(tmp_path / "assistant", 64, 1, causal=True, seed=2)
    assistant = load_assistant(str(tmp_path / "assistant"), "random", main.config, None, CPU, None)
    main_rows = RowDecoder(main.model.decoder, capacity=4, max_width=16)
    assistant_rows = RowDecoder(assistant.decoder, capacity=4, max_width=16)
    verifier = GreedyVerifier(
        main_rows, OutputHead(main.proj_out), [], [], 599, None, 600, torch.device("cpu")
    )
    head = OutputHead(assistant.proj_out)
    passes = []
    forward = assistant_rows.forward

    def counted(rows, feeds):
        passes.append(len(rows))
        return forward(rows, feeds)

    assistant_rows.forward = counted  # type: ignore[method-assign]
    torch.manual_seed(4)
    with torch.inference_mode():
        hidden = main.model.encoder(torch.randn(3, 80, 3000)).last_hidden_state
        plain = [greedy_rows(verifier, [597], main_rows.add(h[None]), [None])[0] for h in hidden]
        drafters = [AssistantDrafter(row, head, eot=599) for row in assistant_rows.add(hidden)]
        if chained:  # a hypothesis right for its first 5 tokens, then nothing more
            drafters = [
                ChainedDrafter(HypothesisDrafter(p.tokens[:5]), d) for p, d in zip(plain, drafters)
            ]
        together = greedy_rows(verifier, [597], main_rows.add(hidden), drafters)
    assert [d.tokens for d in together] == [d.tokens for d in plain]
    assert sum(d.stats.drafted for d in together) > 20
    assert max(passes) == 3  # rows drafting in the same passes
    # Row by row, a draft of n tokens took n passes (the catch-up pass gives the first).
    assert len(passes) < 0.6 * sum(d.stats.drafted for d in together)


def test_incompatible_assistant_is_refused_with_a_reason(models_dir):
    """tiny.en (English vocabulary) cannot draft for base (multilingual): a clear refusal."""
    with pytest.raises(IncompatibleAssistant, match="vocabularies differ"):
        WhisperEngine(
            resolve_model("base", models_dir),
            "base",
            CPU,
            assistant_source=resolve_model("tiny.en", models_dir),
        )


def test_decoder_only_assistant_must_match_the_encoder_width(tmp_path):
    """A decoder-only assistant of another width than the main encoder is refused."""
    main = random_whisper(tmp_path / "main", 64, 2)
    random_whisper(tmp_path / "narrow", 32, 1, causal=True)
    with pytest.raises(IncompatibleAssistant, match="width"):
        load_assistant(str(tmp_path / "narrow"), "narrow", main.config, None, CPU, None)


def test_hypothesis_drafter_follows_the_previous_hypothesis():
    """It proposes the old continuation, and re-anchors after a revision by n-gram lookup."""
    drafter = HypothesisDrafter([1, 2, 3, 4, 5, 6, 7])
    assert drafter.propose([], [1, 2], 3) == [3, 4, 5]
    assert drafter.propose([], [1, 9, 4, 5], 2) == [6, 7]  # "4 5" found, continue after it
    assert drafter.propose([], [8, 8], 4) == []
    assert drafter.propose([], [1, 2, 3, 4, 5, 6, 7], 4) == []
    far = HypothesisDrafter([5, 1, 2] + list(range(10, 40)) + [5, 6])
    assert far.propose([], [5], 2) == [1, 2]
    assert far.propose([], [5, 9, 5], 2) == [1, 2]  # the "5" near the start, not the far one


def test_silence_and_noise_give_no_text(tiny_engine):
    """The no-speech and compression guards keep hallucinations out of the text."""
    rng = np.random.default_rng(1)
    for audio in (silence(3.0), (0.05 * rng.standard_normal(48000)).astype(np.float32)):
        result = tiny_engine.transcribe(audio, with_words=True)
        assert result.text == "" and result.words == ()
        assert result.rejected is not None or result.tokens == ()


def test_loud_noise_after_silence_is_not_a_word(tiny_engine):
    """White noise at 0.3 after silence (the segment the VAD cuts from it) decodes to "You"
    with a doubtful score; the short-text guard drops it, while short spoken answers stay."""
    rng = np.random.default_rng(0)
    noise = np.concatenate([silence(0.3), (0.3 * rng.standard_normal(4 * 16000))]).clip(-1, 1)
    result = tiny_engine.transcribe(noise.astype(np.float32), with_words=True)
    assert (result.text, result.rejected) == ("", "no_speech") and len(result.tokens) <= 3
    for answer in ("Yes.", "Okay."):
        spoken = np.concatenate([silence(0.3), speak(answer), silence(0.3)])
        assert tiny_engine.transcribe(spoken).text.rstrip(".") == answer.rstrip(".")


def test_a_far_crowd_is_not_thanked(tiny_engine):
    """A far-off crowd's murmur, cut where the VAD cuts it, decodes as "Thank you very
    much." (no-speech 0.16, mean log-probability -0.69: openai's rules keep it); a stock
    phrase decoded that unsure is dropped, while "Thank you." said stays."""
    crowd = at_level(crowd_murmur(30 * SAMPLE_RATE), -30)
    pause = crowd[int(11.25 * SAMPLE_RATE) : int(14.07 * SAMPLE_RATE)]
    result = tiny_engine.transcribe(pause, with_words=True)
    assert (result.text, result.rejected) == ("", "no_speech")
    said = np.concatenate([silence(0.3), speak("Thank you."), silence(0.3)])
    assert tiny_engine.transcribe(said).text == "Thank you."


def test_a_far_crowd_in_a_meetings_pause_is_not_written(tiny_engine):
    """A far-off crowd's murmur 20 dB under a talker's speech, cut where the VAD cuts it
    in a pause, decodes as a sentence at a mean log-probability of -1.29; judged after
    the talker's sentence, against the stream's speech level, it is dropped."""
    said = speak("Thank you all for coming today.")
    talker_dbfs = 10 * np.log10(np.mean(said[np.abs(said) > 1e-3] ** 2))
    crowd = at_level(crowd_murmur(60 * SAMPLE_RATE), talker_dbfs - 20)
    pause = crowd[int(30.9 * SAMPLE_RATE) : int(33.75 * SAMPLE_RATE)]
    murmur = tiny_engine.transcribe(pause, with_words=True)
    assert murmur.text.count(" ") >= 4 and murmur.avg_logprob < -1.0, murmur
    level = SpeechLevel(tiny_engine.guards)
    talker = np.concatenate([silence(0.3), said, silence(0.3)])
    heard = level.final(tiny_engine.transcribe(talker, with_words=True), talker)
    assert heard.text == "Thank you all for coming today."
    judged = level.final(murmur, pause)
    assert (judged.text, judged.rejected) == ("", "no_speech")


def test_a_beep_is_not_a_word(tiny_engine):
    """A half-second 1 kHz beep between silences decodes to a short word with a confident
    score but no-speech 0.64: a short text that unsure of speech is dropped."""
    t = np.arange(8000) / 16000
    beep = np.concatenate([silence(0.3), 0.3 * np.sin(2 * np.pi * 1000 * t), silence(0.3)])
    result = tiny_engine.transcribe(beep.astype(np.float32), with_words=True)
    assert (result.text, result.rejected) == ("", "no_speech")


def test_a_doubted_decode_is_drawn_again_the_same_each_time_and_the_likelier_kept(tiny_engine):
    """A command tiny.en reads as "Santa the Fermis Tatson Warum", with a mean
    log-probability under FALLBACK_BELOW, is drawn again at a temperature: with no drafts
    (a drawn token is no greedy choice to check a draft against), the same tokens each
    time (a seeded draw), and the likelier decode kept, as Whisper's own fallback keeps
    it. (What it does to WER is bench/voice_commands.py's.)"""
    audio = speak("Set the thermostat to warm.")

    def decoded(request: AsrRequest):  # one decode, no attempt after it
        (decode,) = tiny_engine.start([request])
        while not decode.finished:
            tiny_engine.step([decode], [tiny_engine.max_draft])
        return tiny_engine.finish(decode)

    greedy = decoded(AsrRequest(audio))
    assert greedy.avg_logprob < FALLBACK_BELOW, greedy
    drawn = decoded(AsrRequest(audio, temperature=0.2, draft=greedy.tokens))
    assert drawn.stats.drafted == 0 and drawn.tokens != greedy.tokens
    assert decoded(AsrRequest(audio, temperature=0.2)).tokens == drawn.tokens
    kept = transcribe(tiny_engine, AsrRequest(audio))
    assert kept.avg_logprob > greedy.avg_logprob and kept.tokens != greedy.tokens, kept
    # each decode says how it was made (verbose_json's segments carry it)
    assert (greedy.temperature, drawn.temperature) == (0.0, 0.2)
    assert kept.temperature in FALLBACK_TEMPERATURES
