-- Nexmark q1 as Flink SQL: 'weir job submit deploy/nexmark-q1.sql --wait' on a running cluster; 'weir sql explain
-- deploy/nexmark-q1.sql' shows what it plans into. bench/nexmark/sql/ holds the table, views and queries apart.
SET 'pipeline.name' = 'nexmark-q1';
SET 'execution.checkpointing.interval' = '10 s';

-- The Nexmark stream (NexmarkGen, GENERATOR.md) as one table, in the shape of Nexmark's own source table:
-- one nullable ROW per event type, a computed event-time column and a 4 s bounded-delay watermark.
CREATE TABLE datagen (
    event_type INT,
    person ROW<
        id BIGINT,
        name VARCHAR,
        emailAddress VARCHAR,
        creditCard VARCHAR,
        city VARCHAR,
        state VARCHAR,
        `dateTime` TIMESTAMP(3),
        extra VARCHAR>,
    auction ROW<
        id BIGINT,
        itemName VARCHAR,
        description VARCHAR,
        initialBid BIGINT,
        reserve BIGINT,
        `dateTime` TIMESTAMP(3),
        expires TIMESTAMP(3),
        seller BIGINT,
        category BIGINT,
        extra VARCHAR>,
    bid ROW<
        auction BIGINT,
        bidder BIGINT,
        price BIGINT,
        channel VARCHAR,
        url VARCHAR,
        `dateTime` TIMESTAMP(3),
        extra VARCHAR>,
    `dateTime` AS CASE event_type
        WHEN 0 THEN person.`dateTime`
        WHEN 1 THEN auction.`dateTime`
        ELSE bid.`dateTime`
    END,
    WATERMARK FOR `dateTime` AS `dateTime` - INTERVAL '4' SECOND
) WITH (
    'connector' = 'nexmark',
    'events' = '1000000',
    'tps' = '10000',
    'block' = '0'
);

-- One view per event type. Each view carries the table's event-time column `dateTime` (not the nested
-- copy), so that windows and watermarks work on the views.
CREATE VIEW person AS
SELECT person.id, person.name, person.emailAddress, person.creditCard, person.city, person.state,
       `dateTime`, person.extra
FROM datagen WHERE event_type = 0;

CREATE VIEW auction AS
SELECT auction.id, auction.itemName, auction.description, auction.initialBid, auction.reserve,
       `dateTime`, auction.expires, auction.seller, auction.category, auction.extra
FROM datagen WHERE event_type = 1;

CREATE VIEW bid AS
SELECT bid.auction, bid.bidder, bid.price, bid.channel, bid.url, `dateTime`, bid.extra
FROM datagen WHERE event_type = 2;

-- q1: currency conversion. Each bid with its price in euros (0.908 * dollars; DECIMAL(23, 3)).
CREATE TABLE nexmark_q1 (
    auction BIGINT,
    bidder BIGINT,
    price DECIMAL(23, 3),
    `dateTime` TIMESTAMP(3),
    extra VARCHAR
) WITH ('connector' = 'blackhole');

INSERT INTO nexmark_q1
SELECT auction, bidder, 0.908 * price AS price, `dateTime`, extra
FROM bid;
