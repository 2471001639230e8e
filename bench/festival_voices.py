"""Festival's voices, for vocabulary speech that sounds more like a person than espeak-ng.

espeak-ng is a formant synthesiser: every sound is made by rule, which is why tiny.en
reads its plain English sentences at WER 0.2. Festival's voices are built from one real
speaker's recordings: unit selection (Russian), HTS models trained on a speaker
(American English, Catalan) and diphones cut from a speaker (Italian, Finnish, Czech,
a second American English). They still say names by spelling rules, not as a person
who knows the name would.

``apt-get install festival festvox-us-slt-hts festvox-kallpc16k festvox-ca-ona-hts
festvox-ru festvox-italp16k festvox-suopuhe-lj festvox-czech-dita`` brings them (Debian
main; not part of ``make install``: only the benchmarks use them).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from audio_fixtures import read_wav
from parley.core.audio import SAMPLE_RATE
from vocabulary_set import RUSSIAN_SENTENCES


@dataclass(frozen=True)
class FestivalVoice:
    """A Festival voice and the text encoding it reads (Festival reads bytes)."""

    name: str
    encoding: str


# One voice a language, for the languages part.
LANGUAGE_VOICES: dict[str, FestivalVoice] = {
    "en": FestivalVoice("cmu_us_slt_arctic_hts", "latin-1"),
    "it": FestivalVoice("lp_diphone", "latin-1"),
    "ru": FestivalVoice("msu_ru_nsh_clunits", "utf-8"),
    "ca": FestivalVoice("upc_ca_ona_hts", "latin-1"),
    "fi": FestivalVoice("suo_fi_lj_diphone", "latin-1"),
    "cs": FestivalVoice("czech_dita", "iso-8859-2"),
}
# The English voices for keyterms: HTS (a speaker's model) and diphones (a speaker's cuts).
KEYTERM_VOICES = (LANGUAGE_VOICES["en"], FestivalVoice("kal_diphone", "latin-1"))


def installed() -> bool:
    return shutil.which("text2wave") is not None


def speak(text: str, voice: FestivalVoice) -> np.ndarray:
    """Festival's speech of ``text``, resampled by sox to 16 kHz mono float32."""
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "raw.wav"
        subprocess.run(
            ["text2wave", "-eval", f"(voice_{voice.name})", "-o", str(raw)],
            input=text.encode(voice.encoding, "replace"),
            check=True,
            capture_output=True,
        )
        return _resampled(raw)


# Festival's own word times: a word begins with its first syllable's first sound.
_WORD_TIMES = (
    '(mapcar (lambda (w) (format t "W %s %f %f\\n" (item.name w) '
    '(item.feat w "R:SylStructure.daughter1.daughter1.segment_start") '
    "(item.feat w 'word_end))) (utt.relation.items utt 'Word))"
)


def speak_timed(
    text: str, voice: FestivalVoice
) -> tuple[np.ndarray, list[tuple[str, float, float]]]:
    """Festival's speech of ``text`` (16 kHz mono float32; text2wave, which ``speak``
    runs, reports no times), and each word as Festival placed it: (word, start, end) in
    seconds from the audio's start."""
    with tempfile.TemporaryDirectory() as tmp:
        raw, script = Path(tmp) / "raw.wav", Path(tmp) / "say.scm"
        quoted = text.replace("\\", " ").replace('"', " ")
        script.write_bytes(
            (
                f"(voice_{voice.name})\n"
                f'(set! utt (SynthText "{quoted}"))\n'
                f'(utt.save.wave utt "{raw}" \'riff)\n'
                f"{_WORD_TIMES}\n"
            ).encode(voice.encoding, "replace")
        )
        said = subprocess.run(["festival", "-b", str(script)], check=True, capture_output=True)
        words = [
            (name, float(start), float(end))
            for _, name, start, end in (
                line.split()
                for line in said.stdout.decode(voice.encoding, "replace").splitlines()
                if line.startswith("W ")
            )
        ]
        return _resampled(raw), words


def _resampled(raw: Path) -> np.ndarray:
    """A voice's wave at 16 kHz mono. Some voices peak past full scale: 3 dB less, so
    that sox does not clip them. "-R": the same dither every run (tests/audio_fixtures.py)."""
    out = raw.with_name("out.wav")
    subprocess.run(
        ["sox", "-R", str(raw), "-r", str(SAMPLE_RATE), "-c", "1", "-b", "16", str(out)]
        + ["gain", "-3"],
        check=True,
    )
    return read_wav(out)


# The languages' sentences that bench/vocabulary_set.py does not have (same meanings,
# so the translation references match), with their English references.
SENTENCES: dict[str, tuple[tuple[str, str], ...]] = {
    "ru": RUSSIAN_SENTENCES,
    "ca": (
        (
            "La reunió comença demà a les nou a la sala gran.",
            "The meeting starts tomorrow at nine in the large room.",
        ),
        (
            "Si us plau, envia'm l'informe abans del dinar de divendres.",
            "Please send me the report before lunch on Friday.",
        ),
        (
            "Hem d'acabar el projecte abans de final de mes.",
            "We have to finish the project before the end of the month.",
        ),
        (
            "Ahir feia molt de fred, així que ens vam quedar a casa.",
            "Yesterday it was very cold, so we stayed at home.",
        ),
        (
            "El meu germà treballa en un hospital petit a prop de l'estació.",
            "My brother works in a small hospital near the station.",
        ),
        (
            "Em pots dir on és l'estació de tren més propera?",
            "Can you tell me where the nearest train station is?",
        ),
    ),
    "fi": (
        (
            "Kokous alkaa huomenna yhdeksältä isossa huoneessa.",
            "The meeting starts tomorrow at nine in the large room.",
        ),
        (
            "Lähetä minulle raportti ennen perjantain lounasta.",
            "Send me the report before lunch on Friday.",
        ),
        (
            "Meidän täytyy saada projekti valmiiksi ennen kuun loppua.",
            "We have to get the project finished before the end of the month.",
        ),
        (
            "Eilen oli hyvin kylmä, joten jäimme kotiin.",
            "Yesterday it was very cold, so we stayed at home.",
        ),
        (
            "Veljeni työskentelee pienessä sairaalassa aseman lähellä.",
            "My brother works in a small hospital near the station.",
        ),
        (
            "Voitko kertoa, missä on lähin rautatieasema?",
            "Can you tell me where the nearest railway station is?",
        ),
    ),
    "cs": (
        (
            "Schůzka začíná zítra v devět hodin ve velkém sále.",
            "The meeting starts tomorrow at nine o'clock in the large hall.",
        ),
        (
            "Prosím, pošlete mi zprávu před obědem v pátek.",
            "Please send me the report before lunch on Friday.",
        ),
        (
            "Musíme dokončit projekt před koncem měsíce.",
            "We must finish the project before the end of the month.",
        ),
        (
            "Včera byla velká zima, tak jsme zůstali doma.",
            "Yesterday it was very cold, so we stayed at home.",
        ),
        (
            "Můj bratr pracuje v malé nemocnici blízko nádraží.",
            "My brother works in a small hospital near the station.",
        ),
        (
            "Můžete mi říct, kde je nejbližší nádraží?",
            "Can you tell me where the nearest station is?",
        ),
    ),
}
