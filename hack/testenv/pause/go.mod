module github.com/scidmz/scidmz/hack/testenv/pause

go 1.24
