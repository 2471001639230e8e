// The page's transcript written out, as the server and `parley transcribe` write it:
// txt, SubRip and WebVTT subtitles, JSON. Pure functions over finals.

export function clock(seconds) {
  const m = Math.floor(seconds / 60);
  const s = (seconds % 60).toFixed(1).padStart(4, "0");
  return `${String(m).padStart(2, "0")}:${s}`;
}

// Subtitle cues as the server and `parley transcribe` write them (server/parley/client/
// captions.py, protocol.md section 16): at most two lines of 42 characters and 7 s, cut
// between words by their times, at each change of speaker, and before a sentence the cue
// cannot hold whole.
const CUE = { lineChars: 42, lines: 2, seconds: 7 };
const SENTENCE_END = /[.?!…。！？]["')»”’]*$/;  // core/words.py's ends_sentence

function cues(list) {
  const out = [];
  for (const f of list) {
    const words = f.words ?? [];
    if (!words.length) {
      out.push({ start: f.start, end: f.end, speaker: f.speaker, lines: wrap(f.text.trim()) });
      continue;
    }
    const sentence = [];  // from each word to its sentence's end, in characters
    for (let i = words.length - 1; i >= 0; i--) {
      const ends = SENTENCE_END.test(words[i].word) || i === words.length - 1;
      sentence[i] = words[i].word.length + (ends ? 0 : 1 + sentence[i + 1]);
    }
    const who = (w) => w.speaker ?? f.speaker;
    const most = CUE.lineChars * CUE.lines;
    let run = [], length = 0;
    const close = () => {
      const start = Math.max(run[0].start, f.start);
      const end = Math.max(start, Math.min(run.at(-1).end, f.end));
      out.push({ start, end, speaker: who(run[0]), lines: wrap(run.map((w) => w.word).join(" ")) });
    };
    words.forEach((w, i) => {
      let longer = run.length ? length + 1 + w.word.length : w.word.length;
      if (run.length && (who(w) !== who(run[0]) || longer > most || w.end - run[0].start > CUE.seconds
          || (SENTENCE_END.test(run.at(-1).word) && length + 1 + sentence[i] > most))) {
        close();
        run = [];
        longer = w.word.length;
      }
      run.push(w);
      length = longer;
    });
    if (run.length) close();
  }
  return out;
}

// Two lines cut where they come out most even; more, filled word by word.
function wrap(text) {
  if (text.length <= CUE.lineChars) return [text];
  let cut = -1;
  for (let i = 0; i < text.length; i++) {
    const fits = text[i] === " " && i <= CUE.lineChars && text.length - i - 1 <= CUE.lineChars;
    if (fits && (cut < 0 || Math.abs(text.length - 2 * i - 1) < Math.abs(text.length - 2 * cut - 1))) cut = i;
  }
  if (cut >= 0) return [text.slice(0, cut), text.slice(cut + 1)];
  const lines = [];
  let line = "";
  for (const word of text.split(" ")) {
    if (line && line.length + 1 + word.length > CUE.lineChars) {
      lines.push(line);
      line = word;
    } else line = line ? `${line} ${word}` : word;
  }
  return [...lines, line];
}

// Consecutive words of one speaker, each run with the time it begins (the first at the
// final's start): a final can hold a change of turn that came without a pause.
export function runsOf(final) {
  const runs = [];
  for (const word of final.words ?? []) {
    const speaker = word.speaker ?? final.speaker;
    const last = runs.at(-1);
    if (last && last.speaker === speaker) last.words.push(word.word);
    else runs.push({ start: runs.length ? word.start : final.start, speaker, words: [word.word] });
  }
  return runs.length ? runs : [{ start: final.start, speaker: final.speaker, words: [final.text] }];
}

// The transcript as a file of `format` (txt, srt, vtt, json), each speaker by `nameOf`.
export function transcriptAs(format, list, nameOf) {
  return writers[format](list, nameOf);
}

const writers = {
  // A line a speaker's run: a final's own speaker names only who said most of it.
  txt: (list, nameOf) => list.flatMap((f) => {
    const runs = runsOf(f);
    const line = (start, speaker, text) => `[${clock(start)}] ${speaker ? nameOf(speaker) + ": " : ""}${text}`;
    return runs.length === 1 ? [line(f.start, f.speaker, f.text)] : runs.map((r) => line(r.start, r.speaker, r.words.join(" ")));
  }).join("\n") + "\n",
  srt: (list, nameOf) => cues(list).map((c, i) => `${i + 1}\n${stamp(c.start, ",")} --> ${stamp(c.end, ",")}\n${c.speaker ? nameOf(c.speaker) + ": " : ""}${c.lines.join("\n")}\n`).join("\n"),
  vtt: (list, nameOf) => "WEBVTT\n\n" + cues(list).map((c) => `${stamp(c.start, ".")} --> ${stamp(c.end, ".")}\n${c.speaker ? `<v ${nameOf(c.speaker)}>` : ""}${c.lines.join("\n")}\n`).join("\n"),
  json: (list, nameOf) => JSON.stringify(list.map((f) => ({ ...f, speaker_name: nameOf(f.speaker) || null })), null, 2),
};

function stamp(seconds, separator) {
  const ms = Math.round(seconds * 1000);
  const h = String(Math.floor(ms / 3600000)).padStart(2, "0");
  const m = String(Math.floor(ms / 60000) % 60).padStart(2, "0");
  const s = String(Math.floor(ms / 1000) % 60).padStart(2, "0");
  return `${h}:${m}:${s}${separator}${String(ms % 1000).padStart(3, "0")}`;
}
