package io.jnbd.server;

import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.util.HashMap;
import java.util.Map;

/** One GET of /metrics: each sample's value by its series as the text format writes it, {@code name{l="v",...}}. */
public record MetricsScrape(String text, Map<String, Double> samples) {

    public static MetricsScrape of(int port) throws IOException, InterruptedException {
        try (HttpClient http = HttpClient.newHttpClient()) {
            HttpResponse<String> r = http.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + "/metrics")).build(),
                HttpResponse.BodyHandlers.ofString());
            if (r.statusCode() != 200) throw new IOException("GET /metrics: HTTP " + r.statusCode() + "\n" + r.body());
            return parse(r.body());
        }
    }

    public static MetricsScrape parse(String text) {
        Map<String, Double> samples = new HashMap<>();
        for (String line : text.split("\n")) {
            if (line.isBlank() || line.startsWith("#")) continue;
            int space = line.lastIndexOf(' ');
            samples.put(line.substring(0, space), Double.parseDouble(line.substring(space + 1)));
        }
        return new MetricsScrape(text, samples);
    }

    /** The sample's value; fails naming the series when the scrape has no such sample. */
    public double value(String series) {
        Double v = samples.get(series);
        if (v == null) throw new AssertionError("no sample " + series + " in:\n" + text);
        return v;
    }
}
