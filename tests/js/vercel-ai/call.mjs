// The Vercel AI SDK's default OpenAI provider (the Responses API) against rein serve:
// node call.mjs BASE_URL API_KEY PROMPT — prints one JSON line with what came back.
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, streamText } from "ai";

const [baseURL, apiKey, prompt] = process.argv.slice(2);
const openai = createOpenAI({ baseURL, apiKey });

const first = await generateText({ model: openai("bot"), prompt });
// The next turn resends the conversation; the SDK refers to stored replies by their item id.
const second = await generateText({
  model: openai("bot"),
  messages: [{ role: "user", content: prompt }, ...first.response.messages, { role: "user", content: `again ${prompt}` }],
});
const stream = streamText({ model: openai("bot"), prompt: `streamed ${prompt}` });
let streamed = "";
for await (const part of stream.textStream) streamed += part;

console.log(JSON.stringify({
  generated: first.text,
  followUp: second.text,
  streamed,
  finishReason: await stream.finishReason,
  usage: await stream.usage,
}));
