// A meeting in a tab and you on the microphone, as one transcript: each session's finals
// keyed apart, on the first session's clock, yours as You, and loudspeakers' echo of the
// tab in your microphone told from you. Pure functions over finals.

// Where the source is a meeting in a tab and you: the tab's voices are told apart by the
// server, and the microphone's session (no speakers of its own) is you.
export const ME = "You";

export function keyOf(run, who, segmentId) {
  return `${run}:${who}:${segmentId}`;
}

// A meeting played through loudspeakers reaches your microphone too: a final of yours
// whose words are, in order, mostly words the tab's session heard at the same time is
// that echo, not you. It is hidden (kept, marked `echo`) and left out of the downloads.
const ECHO_SHARE = 0.7;    // of your final's words, found in order among the tab's
const ECHO_SLACK_S = 1.5;  // the tab's words this far either side of your final count

function spoken(word) {
  return word.toLowerCase().replace(/[^\p{L}\p{N}']+/gu, "");
}

// How many of `a`'s words `b` holds in the same order (their longest common subsequence).
function inOrder(a, b) {
  let row = new Array(b.length + 1).fill(0);
  for (const x of a) {
    const next = [0];
    b.forEach((y, j) => next.push(x === y ? row[j] + 1 : Math.max(row[j + 1], next[j])));
    row = next;
  }
  return row[b.length];
}

// Whether `mine` (a final of yours) is the echo of the tab's among `finals`.
export function isEcho(mine, finals) {
  const heard = finals
    .filter((f) => f.run === mine.run && f.who === "tab")
    .flatMap((f) => f.words)
    .filter((w) => near(mine, w))
    .sort((a, b) => a.start - b.start)
    .map((w) => spoken(w.word)).filter(Boolean);
  const own = mine.words.map((w) => spoken(w.word)).filter(Boolean);
  return own.length > 0 && inOrder(own, heard) >= ECHO_SHARE * own.length;
}

// Whether `theirs` (a final or a word) is close enough in time to `mine` to be heard as
// its echo.
export function near(mine, theirs) {
  return theirs.end >= mine.start - ECHO_SLACK_S && theirs.start <= mine.end + ECHO_SLACK_S;
}

// Segments in the order they were said: by Start (or recording), then by time.
export function byTime(a, b) {
  return a.run - b.run || a.start - b.start;
}

// A final as the page keeps it: keyed by its Start and session, its times (and its
// words') shifted to the first session's clock, a meeting's microphone's as you.
export function placed(message, client, run) {
  return { ...shifted(message, client), run, who: client.who, key: keyOf(run, client.who, message.segment_id),
           words: message.words.map((w) => shifted(w, client)), speaker: speakerOf(message, client) };
}

export function shifted(timed, client) {
  return { ...timed, start: timed.start + client.shift, end: timed.end + client.shift };
}

export function speakerOf(message, client) {
  return client.who === "me" ? ME : message.speaker;
}
