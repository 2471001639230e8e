// AudioWorklet: float32 microphone frames → PCM16 LE chunks, plus an RMS level per chunk.
// Runs on the audio thread; buffers are preallocated, nothing grows.

class Pcm16Processor extends AudioWorkletProcessor {
  constructor(options) {
    super();
    this.chunk = new Int16Array(options.processorOptions.chunkSamples);
    this.filled = 0;
    this.sumSquares = 0;
    this.port.onmessage = (event) => {
      if (event.data.flush) {
        this.send(this.filled);
        this.port.postMessage({ flushed: true });
      }
    };
  }

  send(count) {
    if (count === 0) return;
    const pcm = this.chunk.slice(0, count).buffer; // a copy, transferred to the page
    const rms = Math.sqrt(this.sumSquares / count);
    this.port.postMessage({ pcm, rms }, [pcm]);
    this.filled = 0;
    this.sumSquares = 0;
  }

  process(inputs) {
    const channels = inputs[0];
    if (!channels || channels.length === 0) return true;
    const frames = channels[0].length;
    for (let i = 0; i < frames; i += 1) {
      let sample = 0;
      for (const channel of channels) sample += channel[i];
      sample = Math.max(-1, Math.min(1, sample / channels.length));
      this.sumSquares += sample * sample;
      this.chunk[this.filled] = sample < 0 ? sample * 0x8000 : sample * 0x7fff;
      this.filled += 1;
      if (this.filled === this.chunk.length) this.send(this.filled);
    }
    return true;
  }
}

registerProcessor("parley-pcm16", Pcm16Processor);
