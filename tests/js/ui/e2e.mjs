// Drives the chat page of `rein serve --ui` in headless Chromium and prints what it saw as one JSON
// line (tests/agent/test_server_ui.py asserts on it).
// Usage: node e2e.mjs BASE_URL API_KEY SCREENSHOT_DIR
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { chromium } from "playwright-core";

const [base, key, shots] = process.argv.slice(2);
const userDataDir = mkdtempSync(path.join(tmpdir(), "rein-ui-chromium-"));
const context = await chromium.launchPersistentContext(userDataDir, {
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  viewport: { width: 1200, height: 800 },
  args: [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync",
  ],
});
const seen = { screenshots: [], page_errors: [] };
const shot = async (page, name) => {
  await page.screenshot({ path: path.join(shots, name), fullPage: true });
  seen.screenshots.push(name);
};
const idle = (page) => page.waitForFunction(() => document.body.dataset.busy !== "true");
const last = (page, selector) => page.locator(`#log article.msg.assistant:last-of-type ${selector}`);

try {
  const page = context.pages()[0] || (await context.newPage());
  page.setDefaultTimeout(20_000);
  page.on("pageerror", (err) => seen.page_errors.push(String(err)));
  await page.goto(`${base}/`);

  // The server has keys: the page asks for one first.
  await page.locator("#key-dialog[open]").waitFor();
  seen.needed_key = true;
  await shot(page, "01-key.png");
  await page.fill("#key", key);
  await page.click("#connect");
  await page.waitForSelector("body[data-ready=true]");
  seen.agents = await page.$$eval("#agent option", (options) => options.map((o) => o.value));

  // Record the answer's text each time it changes, to see it stream.
  await page.evaluate(() => {
    window.partials = [];
    new MutationObserver(() => {
      const answer = document.querySelector("#log article.msg.assistant:last-of-type .answer");
      const text = answer ? answer.textContent : "";
      if (text && window.partials[window.partials.length - 1] !== text) window.partials.push(text);
    }).observe(document.getElementById("log"), { subtree: true, childList: true, characterData: true });
  });
  await page.selectOption("#agent", "shop");
  await page.fill("#input", "Where is my order?");
  await page.click("#send");
  await idle(page);
  seen.partials = await page.evaluate(() => window.partials);
  seen.answer = await last(page, ".answer").textContent();
  seen.plant = await last(page, ".plant .text").first().textContent();
  seen.plant_label = await last(page, ".plant .label").first().textContent();
  seen.mode = await last(page, ".badge.mode").textContent();
  seen.tools_summary = await last(page, "details.tools summary").textContent();
  seen.tools_folded = !(await last(page, "details.tools").evaluate((d) => d.open));
  await shot(page, "02-answer.png");
  await last(page, "details.tools summary").click();
  seen.tool_name = await last(page, ".tool .name").textContent();
  seen.tool_result = await last(page, ".tool .result").textContent();
  await shot(page, "03-tool-calls-open.png");

  // A reload keeps the key (sessionStorage); the conversation is listed and reopens.
  await page.reload();
  await page.waitForSelector("body[data-ready=true]");
  const listed = page.locator("#threads li[data-thread^='ui-where-is-my-order-'] button");
  seen.listed = (await listed.count()) === 1;
  await listed.click();
  await page.waitForFunction(() => document.querySelector("#log article.msg.assistant .answer")?.textContent);
  seen.reopened_answer = await last(page, ".answer").textContent();
  await shot(page, "04-reopened.png");

  // A call that needs approval: the turn pauses with Approve and Reject buttons.
  await page.click("#new-chat");
  await page.fill("#input", "cancel W7");
  await page.click("#send");
  await idle(page);
  const box = last(page, ".approval").first();
  seen.approval_prompt = await box.locator("div").first().textContent();
  await shot(page, "05-approval.png");
  await box.locator("button.approve").click();
  await idle(page);
  seen.approved_result = await last(page, ".tool .result").first().textContent();
  seen.approved_answer = await last(page, ".answer").textContent();
  await shot(page, "06-approved.png");

  await page.click("#new-chat");
  await page.fill("#input", "cancel W8");
  await page.click("#send");
  await idle(page);
  await last(page, ".approval input.reason").fill("wrong order");
  await last(page, ".approval button.reject").click();
  await idle(page);
  seen.rejected_result = await last(page, ".tool .result").first().textContent();
  seen.rejected_answer = await last(page, ".answer").textContent();
  await shot(page, "07-rejected.png");

  // A model that fails: the server's error, shown as it is.
  await page.selectOption("#agent", "broken");
  await page.fill("#input", "hello");
  await page.click("#send");
  await idle(page);
  seen.error = await last(page, ".error").first().textContent();
  await shot(page, "08-error.png");
} finally {
  await context.close();
  rmSync(userDataDir, { recursive: true, force: true });
}
console.log(JSON.stringify(seen));
