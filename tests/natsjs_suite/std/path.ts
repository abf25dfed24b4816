export { join, resolve, dirname, basename } from "node:path";
