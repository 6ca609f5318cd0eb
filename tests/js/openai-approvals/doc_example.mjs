import OpenAI from "openai";

const client = new OpenAI({
  baseURL: process.env.REIN_URL ?? "http://127.0.0.1:8000/v1",
  apiKey: process.env.REIN_API_KEY ?? "none",
});
const messages = [{ role: "user", content: "Please cancel A-1" }];
let response = await client.chat.completions.create({ model: "clerk", messages });
while (response.choices[0].finish_reason === "tool_calls") {   // paused: the calls await decisions
  const message = response.choices[0].message;
  console.log("paused:", message.content, message.tool_calls.map((c) => `${c.function.name} ${c.function.arguments}`));
  messages.push(message);   // the assistant message as received, then one decision per call
  for (const call of message.tool_calls) {
    const approved = call.function.name === "cancel_order";   // your UI asks a human here
    const decision = approved ? { approved } : { approved, reason: "not from this app" };
    messages.push({ role: "tool", tool_call_id: call.id, content: JSON.stringify(decision) });
  }
  response = await client.chat.completions.create({ model: "clerk", messages });
}
console.log(response.choices[0].message.content);
