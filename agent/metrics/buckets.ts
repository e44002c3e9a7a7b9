/**
 * kube-proxy's and client-go's bucket layouts, copied from upstream so a
 * kube-proxy dashboard's histogram_quantile() and any recording rule over
 * `le` see the same buckets from kpr as from kube-proxy.
 */
import { exponentialBuckets, linearBuckets } from 'prom-client';

/**
 * kubeproxy_sync_{,full_,partial_}proxy_rules_duration_seconds:
 * ExponentialBuckets(0.001, 2, 15) in pkg/proxy/metrics/metrics.go, 1 ms to 16.384 s.
 */
export const SYNC_BUCKETS = exponentialBuckets(0.001, 2, 15);

/**
 * kubeproxy_network_programming_duration_seconds: component-base's
 * MergeBuckets(LinearBuckets(0.25, 0.25, 2), LinearBuckets(1, 1, 59),
 * LinearBuckets(60, 5, 12), LinearBuckets(120, 30, 7)). MergeBuckets starts
 * from a one-element slice, so upstream's first bucket is le="0": 81 buckets,
 * 0 to 300 s.
 */
export const NETWORK_PROGRAMMING_BUCKETS = [
  0,
  ...linearBuckets(0.25, 0.25, 2),
  ...linearBuckets(1, 1, 59),
  ...linearBuckets(60, 5, 12),
  ...linearBuckets(120, 30, 7),
];

/** rest_client_request_duration_seconds: client-go's (k8s.io/component-base/metrics/prometheus/restclient). */
export const REST_CLIENT_BUCKETS = [0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60];
