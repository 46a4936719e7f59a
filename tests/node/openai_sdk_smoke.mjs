// The official `openai` Node package (package.json pins it) against spotreel's /openai/v1: create, poll until
// the video ends, download the MP4. Driven by tests/integration/test_openai_node_sdk.py, which reads the JSON
// line this prints and decodes the file.
//
//   node openai_sdk_smoke.mjs BASE_URL API_KEY MODEL OUT.mp4
import { writeFile } from "node:fs/promises";
import OpenAI from "openai";

const [baseURL, apiKey, model, out] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });

// seconds and size as the model renders them; num_steps is one of spotreel's own options, sent with the form.
let video = await client.videos.create({ prompt: "a red fox running in snow", model, seconds: "0.5", size: "32x32",
                                         num_steps: 2 });
const created = video.status;
const deadline = Date.now() + 120_000;
while (video.status === "queued" || video.status === "in_progress") {
  if (Date.now() > deadline) throw new Error(`video ${video.id} still ${video.status} after 120 s`);
  await new Promise((done) => setTimeout(done, 200));
  video = await client.videos.retrieve(video.id);
}
if (video.status !== "completed") throw new Error(`video ${video.id} ended ${video.status}: ${JSON.stringify(video.error)}`);
const content = await client.videos.downloadContent(video.id);
const mp4 = Buffer.from(await content.arrayBuffer());
await writeFile(out, mp4);
const listed = await client.videos.list({ limit: 1 });
console.log(JSON.stringify({ id: video.id, created, status: video.status, seconds: video.seconds, size: video.size,
                             bytes: mp4.length, listed: listed.data.map((v) => v.id) }));
