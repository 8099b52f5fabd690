// Verifies deliveries with the standardwebhooks package, an implementation
// of the spec independent of runlog's. Reads a JSON array of
// {"secret", "payload", "headers"} on stdin and prints a JSON array with
// "ok" or the verifier's error for each.
const { Webhook } = require("standardwebhooks");

let input = "";
process.stdin.on("data", (chunk) => (input += chunk));
process.stdin.on("end", () => {
  const out = JSON.parse(input).map(({ secret, payload, headers }) => {
    try {
      new Webhook(secret).verify(payload, headers);
      return "ok";
    } catch (e) {
      return String(e && e.message ? e.message : e);
    }
  });
  process.stdout.write(JSON.stringify(out));
});
