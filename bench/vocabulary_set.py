"""The vocabulary test set: sentences with known text for keyterms, languages and
translation, spoken by espeak-ng (bench/vocabulary.py measures with it)."""

from __future__ import annotations

from dataclasses import dataclass

# Sentences that hold rare names, products and jargon; the terms they hold.
KEYTERM_SENTENCES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Please restart the Kubernetes cluster before noon.", ("Kubernetes",)),
    ("Our database runs on PostgreSQL version sixteen.", ("PostgreSQL",)),
    ("Siobhan will present the quarterly numbers.", ("Siobhan",)),
    ("Send the invoice to Nguyen in accounting.", ("Nguyen",)),
    ("We deploy the servers with Terraform and Ansible.", ("Terraform", "Ansible")),
    ("Doctor Okonkwo reviewed the scans this morning.", ("Okonkwo",)),
    ("The patient was given metoprolol twice a day.", ("metoprolol",)),
    ("Check the Grafana dashboard for the latency spike.", ("Grafana",)),
    ("Ask Saoirse about the new contract.", ("Saoirse",)),
    ("Our new product is called Quillspark.", ("Quillspark",)),
    ("Priyanka booked the flight to Reykjavik.", ("Priyanka", "Reykjavik")),
    ("The pipeline reads events from Kafka into Flink.", ("Kafka", "Flink")),
    ("Mister Szymanski called about the delivery.", ("Szymanski",)),
    ("Tell Joaquin the demo moved to Thursday.", ("Joaquin",)),
    ("Install the Xcode command line tools first.", ("Xcode",)),
    ("The invoice from Accenture is overdue.", ("Accenture",)),
    ("Move the files to the Nextcloud share.", ("Nextcloud",)),
    ("Please email Aoife before the review.", ("Aoife",)),
    ("Lakshmi approved the budget for Zendesk.", ("Lakshmi", "Zendesk")),
    ("Run the database migration with Alembic tonight.", ("Alembic",)),
    ("The shipment to Tegucigalpa was delayed again.", ("Tegucigalpa",)),
    ("Xiomara leads the onboarding call on Monday.", ("Xiomara",)),
    ("The contract with Databricks renews in May.", ("Databricks",)),
    ("Our router runs the OpenWrt firmware.", ("OpenWrt",)),
    ("Give the keys to Thiago at the front desk.", ("Thiago",)),
    ("The nurse checked his troponin levels.", ("troponin",)),
    ("Schedule a call with Ramanathan next week.", ("Ramanathan",)),
    ("The Zyrtec order arrives on Friday.", ("Zyrtec",)),
    ("We moved the monitoring from Nagios to Prometheus.", ("Nagios", "Prometheus")),
    ("Dmitri fixed the bug in the Vuetify frontend.", ("Dmitri", "Vuetify")),
    ("The lab ordered a test for procalcitonin.", ("procalcitonin",)),
    ("Ingrid Halvorsen joins the board in June.", ("Halvorsen",)),
)

# Sentences with none of the terms; some sound like them, to catch false insertions.
PLAIN_SENTENCES: tuple[str, ...] = (
    "The meeting starts at nine tomorrow morning.",
    "Please send me the report before lunch.",
    "The cluster of grapes was ripe and sweet.",
    "We took the early flight to the city.",
    "She will present the results after the break.",
    "Move the boxes to the new shelf.",
    "The doctor reviewed the notes with the nurse.",
    "Check the dashboard lights before you drive.",
    "Our new office is close to the station.",
    "He called about the package this morning.",
    "Tell the team the demo moved to Thursday.",
    "Install the new tools before the workshop.",
    "The invoice is due at the end of the month.",
    "The contract renews every spring.",
    "Give the keys to the driver at the gate.",
    "The shipment was delayed by the storm.",
    "Run the tests again after the fix.",
    "The budget was approved on Monday.",
    "The server room is cold and loud.",
    "We moved the monitoring to a new system.",
    "The lab is closed on public holidays.",
    "Please restart the computer before noon.",
    "The patient was asked to rest for a week.",
    "Our router needs a firmware update.",
    "The pipeline carries water to the farm.",
    "The board meets once a month.",
    "Schedule a call with the client next week.",
    "The order arrives on Friday afternoon.",
    "Ask the manager about the new rules.",
    "The frontend team fixed three bugs today.",
)

KEYTERM_VOICES = ("en-us", "en-gb-x-rp", "en-us+f3")

# Sentences with spoken fillers, which Whisper mostly leaves out (``filler_words``).
FILLER_SENTENCES: tuple[str, ...] = (
    "Um, the delivery should arrive on Tuesday.",
    "I think, uh, the printer is out of paper.",
    "We can, um, try again after lunch.",
    "Uh, did anyone see my umbrella?",
    "The numbers look, um, a little better this week.",
    "So, uh, where do we start?",
    "My flight was, um, delayed by two hours.",
    "She said, uh, that the door was open.",
    "Um, could you repeat the last part?",
    "The train, uh, leaves at half past six.",
    "I forgot the, um, password again.",
    "Uh, the kitchen needs a new light.",
    "We should, um, ask the neighbours first.",
    "It was, uh, a very long day.",
    "Um, let me find the file for you.",
    "The dog, uh, ran across the garden.",
)
FILLER_WORDS = frozenset({"um", "umm", "uh", "uhm", "er", "erm", "hmm", "mm"})


@dataclass(frozen=True)
class Spoken:
    text: str
    terms: tuple[str, ...]
    voice: object  # an espeak-ng voice name, or a festival_voices.FestivalVoice


def keyterm_items(voices: tuple = KEYTERM_VOICES) -> list[Spoken]:
    """Every keyterm and plain sentence in each of ``voices`` (espeak-ng's voice names, or
    bench/festival_voices.py's voices)."""
    items = []
    for voice in voices:
        items += [Spoken(text, terms, voice) for text, terms in KEYTERM_SENTENCES]
        items += [Spoken(text, (), voice) for text in PLAIN_SENTENCES]
    return items


def all_keyterms() -> tuple[str, ...]:
    """The session's glossary: every term of the set."""
    return tuple(t for _, terms in KEYTERM_SENTENCES for t in terms)


# Sentences in six languages with their English translations (for translation scores).
# Each is spoken by espeak-ng's voice of its language, and lasts 2 s or more.
LANGUAGE_SENTENCES: dict[str, tuple[tuple[str, str], ...]] = {
    "en": (
        ("The meeting starts at nine tomorrow morning in the large room.", ""),
        ("Please send me the report before lunch on Friday.", ""),
        ("We have to finish the project before the end of the month.", ""),
        ("The weather was very cold yesterday, so we stayed at home.", ""),
        ("My brother works in a small hospital near the station.", ""),
        ("Can you tell me where the nearest train station is?", ""),
    ),
    "es": (
        (
            "La reunión empieza mañana a las nueve en la sala grande.",
            "The meeting starts tomorrow at nine in the large room.",
        ),
        (
            "Por favor, envíame el informe antes del almuerzo del viernes.",
            "Please send me the report before lunch on Friday.",
        ),
        (
            "Tenemos que terminar el proyecto antes de fin de mes.",
            "We have to finish the project before the end of the month.",
        ),
        (
            "Ayer hacía mucho frío, así que nos quedamos en casa.",
            "Yesterday it was very cold, so we stayed at home.",
        ),
        (
            "Mi hermano trabaja en un pequeño hospital cerca de la estación.",
            "My brother works in a small hospital near the station.",
        ),
        (
            "¿Puedes decirme dónde está la estación de tren más cercana?",
            "Can you tell me where the nearest train station is?",
        ),
    ),
    "fr": (
        (
            "La réunion commence demain à neuf heures dans la grande salle.",
            "The meeting starts tomorrow at nine o'clock in the large room.",
        ),
        (
            "S'il vous plaît, envoyez-moi le rapport avant le déjeuner de vendredi.",
            "Please send me the report before lunch on Friday.",
        ),
        (
            "Nous devons terminer le projet avant la fin du mois.",
            "We must finish the project before the end of the month.",
        ),
        (
            "Il faisait très froid hier, alors nous sommes restés à la maison.",
            "It was very cold yesterday, so we stayed at home.",
        ),
        (
            "Mon frère travaille dans un petit hôpital près de la gare.",
            "My brother works in a small hospital near the station.",
        ),
        (
            "Pouvez-vous me dire où se trouve la gare la plus proche?",
            "Can you tell me where the nearest station is?",
        ),
    ),
    "de": (
        (
            "Die Besprechung beginnt morgen um neun Uhr im großen Raum.",
            "The meeting starts tomorrow at nine o'clock in the large room.",
        ),
        (
            "Bitte schicken Sie mir den Bericht vor dem Mittagessen am Freitag.",
            "Please send me the report before lunch on Friday.",
        ),
        (
            "Wir müssen das Projekt vor dem Ende des Monats fertig machen.",
            "We have to finish the project before the end of the month.",
        ),
        (
            "Gestern war es sehr kalt, deshalb sind wir zu Hause geblieben.",
            "Yesterday it was very cold, so we stayed at home.",
        ),
        (
            "Mein Bruder arbeitet in einem kleinen Krankenhaus in der Nähe des Bahnhofs.",
            "My brother works in a small hospital near the station.",
        ),
        (
            "Können Sie mir sagen, wo der nächste Bahnhof ist?",
            "Can you tell me where the nearest train station is?",
        ),
    ),
    "it": (
        (
            "La riunione inizia domani alle nove nella sala grande.",
            "The meeting starts tomorrow at nine in the large room.",
        ),
        (
            "Per favore, mandami il rapporto prima del pranzo di venerdì.",
            "Please send me the report before lunch on Friday.",
        ),
        (
            "Dobbiamo finire il progetto prima della fine del mese.",
            "We have to finish the project before the end of the month.",
        ),
        (
            "Ieri faceva molto freddo, quindi siamo rimasti a casa.",
            "Yesterday it was very cold, so we stayed at home.",
        ),
        (
            "Mio fratello lavora in un piccolo ospedale vicino alla stazione.",
            "My brother works in a small hospital near the station.",
        ),
        (
            "Puoi dirmi dove si trova la stazione più vicina?",
            "Can you tell me where the nearest station is?",
        ),
    ),
    "pt": (
        (
            "A reunião começa amanhã às nove horas na sala grande.",
            "The meeting starts tomorrow at nine o'clock in the large room.",
        ),
        (
            "Por favor, envie-me o relatório antes do almoço de sexta-feira.",
            "Please send me the report before lunch on Friday.",
        ),
        (
            "Temos que terminar o projeto antes do fim do mês.",
            "We have to finish the project before the end of the month.",
        ),
        (
            "Ontem fazia muito frio, então ficamos em casa.",
            "Yesterday it was very cold, so we stayed at home.",
        ),
        (
            "O meu irmão trabalha num pequeno hospital perto da estação.",
            "My brother works in a small hospital near the station.",
        ),
        (
            "Pode dizer-me onde fica a estação de comboios mais próxima?",
            "Can you tell me where the nearest train station is?",
        ),
    ),
}
# espeak-ng's voice for each language, and a second voice (another pitch and speed).
LANGUAGE_VOICES = {"en": "en-us", "es": "es", "fr": "fr", "de": "de", "it": "it", "pt": "pt"}
RUSSIAN_SENTENCES: tuple[tuple[str, str], ...] = (
    (
        "Встреча начинается завтра в девять утра в большом зале.",
        "The meeting starts tomorrow at nine in the morning in the large hall.",
    ),
    (
        "Пожалуйста, пришлите мне отчёт до обеда в пятницу.",
        "Please send me the report before lunch on Friday.",
    ),
    (
        "Нам нужно закончить проект до конца месяца.",
        "We need to finish the project before the end of the month.",
    ),
    (
        "Вчера было очень холодно, поэтому мы остались дома.",
        "Yesterday it was very cold, so we stayed at home.",
    ),
    (
        "Мой брат работает в маленькой больнице рядом с вокзалом.",
        "My brother works in a small hospital near the station.",
    ),
    (
        "Вы не подскажете, где ближайшая станция?",
        "Could you tell me where the nearest station is?",
    ),
)
# Other-language speech for the English-only model's flag (Russian too: another script).
FOREIGN_SENTENCES: dict[str, tuple[str, ...]] = {
    **{
        code: tuple(s for s, _ in sentences)
        for code, sentences in LANGUAGE_SENTENCES.items()
        if code != "en"
    },
    "ru": tuple(s for s, _ in RUSSIAN_SENTENCES),
}

# Spoken numbers for redaction: (sentence, the category of its number, or none).
REDACTION_SENTENCES: tuple[tuple[str, str], ...] = (
    # (not 4111 1111 1111 1111: a text that repetitive is dropped as a repetition loop)
    ("My card number is 4 5 3 9, 1 4 8 8, 0 3 4 3, 6 4 6 7, and it expires soon.", "pci"),
    ("The card is 5 1 0 5, 1 0 5 1, 0 5 1 0, 5 1 0 0, thank you.", "pci"),
    ("Please charge 3 7 8 2, 8 2 2 4, 6 3 1 0, 0 0 5 for the order.", "pci"),
    ("My social security number is 1 2 3, 4 5, 6 7 8 9.", "ssn"),
    ("The number on file is 9 8 7, 6 5, 4 3 2 0.", "ssn"),
    ("You can call me back at 4 1 5, 5 5 5, 0 1 3 2 after lunch.", "phone"),
    ("My phone number is 2 1 2, 5 5 5, 0 1 9 9.", "phone"),
    # a card's expiry date and security code, known by the words before them (pci)
    ("It expires 0 9, 2 7, thank you.", "pci"),
    ("The expiration date is 0 9, 2 8.", "pci"),
    ("The card is valid through 1 1, 2 6.", "pci"),
    ("The security code is 4 1 2.", "pci"),
    ("I ordered three boxes on Monday.", ""),
    ("We met at the office at ten.", ""),
    ("The invoice for $1,250.50 is due in 2025.", ""),
    ("Room 402 is on the fourth floor.", ""),
    ("The code for the door is 4 1 2.", ""),
)
