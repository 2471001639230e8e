"""The model worker threads and what they are asked: the ASR scheduler (its event-loop
side and the thread's rounds), its calibration and statistics, the diarization worker,
the passing threads, and a stream's decoding options as requests."""
