"""`spotreel demo`: the main job end to end on the running local stack. One real worker, one video
submitted through the public API, its progress followed, the MP4 downloaded, verified and decoded."""
