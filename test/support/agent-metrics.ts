/** The sandbox agent's /metrics, as the e2e suites read it. */
import type { AgentProcess } from '../../sandbox/agent-logs.js';
import { parseProm, valueOf, type Sample } from '../metrics/prom-text.js';

/** "http://host:port" of the agent's metrics server, from its start-up log line. */
export async function metricsUrlOf(agent: Pick<AgentProcess, 'waitForLog'>): Promise<string> {
  return `http://${(await agent.waitForLog('metrics server listening')).address}`;
}

/** One scrape of `${url}/metrics`. */
export async function scrape(url: string): Promise<Sample[]> {
  return parseProm(await (await fetch(`${url}/metrics`)).text());
}

/** One series' value in a fresh scrape (labels as valueOf matches them); 0 when absent. */
export async function metricValue(url: string, name: string, labels: Record<string, string> = {}): Promise<number> {
  return valueOf(await scrape(url), name, labels) ?? 0;
}
