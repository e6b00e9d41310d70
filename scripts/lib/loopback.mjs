// Preloaded into a Node.js server the benchmark runs (`node --import <this file> ...`):
// a listen() on every interface ("0.0.0.0", "::" or no host) binds 127.0.0.1 instead,
// so a program that hard-codes its host still stays on loopback.
import net from "node:net";

const ANY = new Set([undefined, null, "", "0.0.0.0", "::"]);
const listen = net.Server.prototype.listen;

net.Server.prototype.listen = function (...args) {
  const [first] = args;
  if (first !== null && typeof first === "object" && !("fd" in first) && !first.path) {
    if (ANY.has(first.host)) args[0] = { ...first, host: "127.0.0.1" };
  } else if (typeof first === "number" || (typeof first === "string" && /^\d+$/.test(first))) {
    if (typeof args[1] !== "string" || ANY.has(args[1])) {
      // listen(port[, host][, backlog][, callback]): put the host in, or replace it
      if (typeof args[1] === "string") args[1] = "127.0.0.1";
      else args.splice(1, 0, "127.0.0.1");
    }
  }
  return listen.apply(this, args);
};
